"""The fake torch's ``torch.version``."""

cuda = "12.8"
