"""leverbench: where the wall clock of LLM serving goes, and which lever pays back."""

__version__ = "0.1.0"
