"""PrisCrowd (Huai et al., "Privacy-aware Synthesizing for Crowdsourced Data", IJCAI 2019): privacy-aware synthesis
of crowd claims with per-source reliability weights."""

from crowddb.synth.accounting import choose_t, compose, theorem2
from crowddb.synth.api import SynthResult, synthesize
from crowddb.synth.sampler import k_prime, privacy_buckets
from crowddb.synth.weights import combined_weights, global_weights, hampel_irwls

__all__ = ["SynthResult", "choose_t", "combined_weights", "compose", "global_weights", "hampel_irwls", "k_prime",
           "privacy_buckets", "synthesize", "theorem2"]
