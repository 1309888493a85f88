"""Optimizers of LLM training, written once against an array namespace: the Newton–Schulz
polar iteration of Muon (:mod:`nlaverify.optim.newton_schulz`), its certified singular-value
intervals, the coefficient designer, and the reference update rules (Baggag & Saad §2.4,
§5.4, §5.5)."""
