"""The fake torch's ``torch.version``."""

__version__ = "0.0.0+fake"
cuda = "12.8"
