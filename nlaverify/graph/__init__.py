"""Computations held as ``networkx.DiGraph``: evaluate in topological order,
back-propagate in reverse order with the ops' proved VJPs."""

from nlaverify.graph.core import add_input, add_op, backprop, evaluate

__all__ = ["add_input", "add_op", "backprop", "evaluate"]
