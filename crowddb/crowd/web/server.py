"""Serve the HIT web page with uvicorn: in a background thread (a crowddb session) or in the foreground
(``crowddb serve``, or ``python -m crowddb.crowd.web.server --market PATH``). Bound to 127.0.0.1 unless told."""

from __future__ import annotations

import argparse
import socket
import threading
import time

import uvicorn

HOST = "127.0.0.1"
PORT = 8040


def _config(app, host: str, port: int) -> uvicorn.Config:
    return uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="off",
                          timeout_keep_alive=30)


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def url_of(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


class ServerHandle:
    """A uvicorn server running in a daemon thread: ``url``, ``port``, ``stop()``."""

    def __init__(self, server: uvicorn.Server, thread: threading.Thread, host: str, port: int) -> None:
        self.server, self.thread, self.host, self.port = server, thread, host, port
        self.url = url_of(host, port)

    def stop(self, timeout: float = 5.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)

    @property
    def running(self) -> bool:
        return self.thread.is_alive()


def serve_in_thread(app, host: str = HOST, port: int = PORT, *, wait: float = 10.0) -> ServerHandle:
    """Start serving ``app`` on host:port in a daemon thread and return once it accepts connections.
    ``port=0`` picks a free port (``handle.url`` tells it). OSError when the port is taken."""
    sock = _bind(host, port)
    port = sock.getsockname()[1]
    server = uvicorn.Server(_config(app, host, port))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name=f"crowddb-web-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + wait
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            sock.close()
            raise OSError(f"the HIT page server did not start on {url_of(host, port)}")
        time.sleep(0.01)
    return ServerHandle(server, thread, host, port)


def serve(app, host: str = HOST, port: int = PORT) -> None:
    """Serve ``app`` in the foreground until interrupted (Ctrl-C)."""
    uvicorn.Server(_config(app, host, port)).run()


def main(argv: list[str] | None = None) -> None:
    from .app import create_app
    from .market import Market

    parser = argparse.ArgumentParser(prog="python -m crowddb.crowd.web.server",
                                     description="Serve the HIT web page of a market file.")
    parser.add_argument("--market", required=True, help="the market's SQLite file (created when missing)")
    parser.add_argument("--host", default=HOST)
    parser.add_argument("--port", type=int, default=PORT)
    args = parser.parse_args(argv)
    market = Market(args.market)
    # stored hashed: a token this process did not make cannot be shown, so it makes a new one (the old link stops)
    token = market.requester_token or market.new_requester_token()
    print(f"requester page: {url_of(args.host, args.port)}/r/{token}", flush=True)
    serve(create_app(market), args.host, args.port)


if __name__ == "__main__":
    main()
