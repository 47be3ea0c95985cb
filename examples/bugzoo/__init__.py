"""A zoo of minimal samplers reproducing publicly reported speculative-decoding bugs, and their fixes."""
