"""nlaverify: the numerical linear algebra of large language models, as checked facts.

The public API, in one place (see README.md):
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the names, for type checkers and IDEs (the literal edges)
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
    from nlaverify.graph.build import (
        ParameterCounts,
        build_mlp,
        build_transformer,
        parameter_counts,
    )
    from nlaverify.graph.core import backprop, evaluate
    from nlaverify.identities import get_identity, load_catalogue
    from nlaverify.precision import PrecisionReport, verify_precision
    from nlaverify.tolerance import Tolerance, tolerance
    from nlaverify.zoo import ZOO, check_field_effects, field_effect, verify_zoo, zoo_coverage

# ``tolerance`` is also a submodule's name: importing ``nlaverify.tolerance`` sets the package
# attribute to the module, which a lazy name could never rebind; imported now (48 ms, NumPy)
from nlaverify.tolerance import Tolerance, tolerance

#: each public name and the module it lives in: imported on first use (PEP 562), so
#: ``import nlaverify`` costs no SymPy, networkx or JAX
_LAZY: dict[str, str] = {
    'available_backends': 'nlaverify.backends',
    'get_namespace': 'nlaverify.backends',
    'PRESETS': 'nlaverify.config',
    'PUBLISHED': 'nlaverify.config',
    'PUBLISHED_TOTALS': 'nlaverify.config',
    'ConfigError': 'nlaverify.config',
    'TransformerConfig': 'nlaverify.config',
    'preset': 'nlaverify.config',
    'preset_mismatches': 'nlaverify.config',
    'ArgumentError': 'nlaverify.errors',
    'DTypeError': 'nlaverify.errors',
    'NonFiniteError': 'nlaverify.errors',
    'ShapeError': 'nlaverify.errors',
    'UnknownNameError': 'nlaverify.errors',
    'ParameterCounts': 'nlaverify.graph.build',
    'build_mlp': 'nlaverify.graph.build',
    'build_transformer': 'nlaverify.graph.build',
    'parameter_counts': 'nlaverify.graph.build',
    'backprop': 'nlaverify.graph.core',
    'evaluate': 'nlaverify.graph.core',
    'get_identity': 'nlaverify.identities',
    'load_catalogue': 'nlaverify.identities',
    'PrecisionReport': 'nlaverify.precision',
    'verify_precision': 'nlaverify.precision',
    'ZOO': 'nlaverify.zoo',
    'check_field_effects': 'nlaverify.zoo',
    'field_effect': 'nlaverify.zoo',
    'verify_zoo': 'nlaverify.zoo',
    'zoo_coverage': 'nlaverify.zoo',
}

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'nlaverify' has no attribute {name!r}")
    import importlib

    loaded = importlib.import_module(module)
    # bind every public name of that module now: importing a submodule sets the package
    # attribute of its name (nlaverify.tolerance the module, where the name is the function)
    for key, where in _LAZY.items():
        if where == module:
            globals()[key] = getattr(loaded, key)
    return globals()[name]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))



__all__ = [
    "PRESETS", "PUBLISHED", "PUBLISHED_TOTALS", "ZOO", "ArgumentError", "ConfigError",
    "DTypeError", "NonFiniteError", "ParameterCounts", "PrecisionReport", "ShapeError",
    "Tolerance",
    "TransformerConfig", "UnknownNameError", "__version__", "available_backends", "backprop",
    "build_mlp", "build_transformer", "check_field_effects", "evaluate", "field_effect",
    "get_identity", "get_namespace", "load_catalogue", "parameter_counts", "preset",
    "preset_mismatches", "tolerance", "verify_precision", "verify_zoo", "zoo_coverage",
]
