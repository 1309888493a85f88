"""Computations held as ``networkx.DiGraph``: evaluate in topological order, push tangents
forward with the ops' proved JVPs, back-propagate in reverse order with their proved VJPs."""

from nlaverify.graph.core import add_input, add_op, backprop, evaluate, jvp

__all__ = ["add_input", "add_op", "backprop", "evaluate", "jvp"]
