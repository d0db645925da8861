"""The fixed column names of a human operator's input frame (``HumanInput.frame``) and of its question items."""

ROW_ID = "__crowd_row"      # position of the row in the operator's input
GROUP_ID = "__crowd_group"  # group number (group operators)
TRUTH = "__crowd_truth"     # hidden ground truth (never published; the simulated crowd's knowledge)
GOLD = "__crowd_gold"       # known answers for gold questions from a table the requester names (never published)
KEY = "__crowd_key"         # the value a group operator returns for the chosen row
WIDENED = "__crowd_widened"  # a row shown only to keep earlier joint classes whole (privacy.serve.widening)
CONFIDENCE = "__crowd_confidence"  # an accuracy target's posterior of the answer it returns (issue 28)
