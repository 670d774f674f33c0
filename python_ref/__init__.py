"""TinyGPT PyTorch reference: the oracle every other level is checked against."""
