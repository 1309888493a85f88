"""Interoperability with Hugging Face configs and checkpoints."""
