"""nlaverify: the numerical linear algebra of large language models, as checked facts."""

__version__ = "0.1.0"
