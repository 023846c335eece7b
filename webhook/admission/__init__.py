"""The admission core: an AdmissionReview in, the engine's decision, the review to answer.

No HTTP here: the server, the CLI and the tests all answer reviews through these functions.
"""
