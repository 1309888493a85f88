"""nlaverify: the numerical linear algebra of large language models, as checked facts.

The public API, in one place (see README.md):
"""

from nlaverify.backends import available_backends, get_namespace
from nlaverify.config import (
    PRESETS,
    PUBLISHED,
    PUBLISHED_TOTALS,
    ConfigError,
    TransformerConfig,
    preset,
    preset_mismatches,
)
from nlaverify.errors import (
    ArgumentError,
    DTypeError,
    NonFiniteError,
    ShapeError,
    UnknownNameError,
)
from nlaverify.graph.build import ParameterCounts, build_mlp, build_transformer, parameter_counts
from nlaverify.graph.core import backprop, evaluate
from nlaverify.identities import get_identity, load_catalogue
from nlaverify.precision import PrecisionReport, verify_precision
from nlaverify.tolerance import Tolerance, tolerance
from nlaverify.zoo import ZOO, check_field_effects, field_effect, verify_zoo, zoo_coverage

__version__ = "0.1.0"


__all__ = [
    "PRESETS", "PUBLISHED", "PUBLISHED_TOTALS", "ZOO", "ArgumentError", "ConfigError",
    "DTypeError", "NonFiniteError", "ParameterCounts", "PrecisionReport", "ShapeError",
    "Tolerance",
    "TransformerConfig", "UnknownNameError", "__version__", "available_backends", "backprop",
    "build_mlp", "build_transformer", "check_field_effects", "evaluate", "field_effect",
    "get_identity", "get_namespace", "load_catalogue", "parameter_counts", "preset",
    "preset_mismatches", "tolerance", "verify_precision", "verify_zoo", "zoo_coverage",
]
