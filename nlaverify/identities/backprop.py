"""Back-propagation as in Baggag & Saad §2.6: the graph example and the MLP recursion."""

from __future__ import annotations

import networkx as nx
import numpy as np
import sympy

from nlaverify.backends import get_namespace
from nlaverify.graph.core import add_input, add_op, backprop, evaluate
from nlaverify.identities.core import Identity, Proof, Step, qualname, register
from nlaverify.ops.mlp import layer_jacobian, mlp_backprop, mlp_loss
from nlaverify.symbolic.exact import is_zero, symbol_array


def example_graph() -> nx.DiGraph:
    r"""The graph of :math:`f(x,y,z) = (x+y-2)(y+1) + 2z` (Baggag & Saad §2.6, Figure 8):
    :math:`a = x+y-2`, :math:`b = y+1`, :math:`c = 2z`, :math:`f = ab + c`."""
    g = nx.DiGraph()
    for v in "xyz":
        add_input(g, v, ())
    add_op(g, "x+y", "residual_add", ["x", "y"])
    add_op(g, "a", "shift", ["x+y"], c=-2)
    add_op(g, "b", "shift", ["y"], c=1)
    add_op(g, "c", "scale", ["z"], c=2)
    add_op(g, "ab", "mul", ["a", "b"])
    add_op(g, "f", "residual_add", ["ab", "c"])
    return g


def derive_graph_example() -> Proof:
    xp = get_namespace("sympy")
    x, y, z = sympy.symbols("x y z", real=True)
    graph = example_graph()
    values = evaluate(graph, xp, {k: np.asarray(v, dtype=object) for k, v in
                                  {"x": x, "y": y, "z": z}.items()})
    cot = backprop(graph, xp, values, "f")
    f = (x + y - 2) * (y + 1) + 2 * z

    def val(v):
        return np.asarray(v, dtype=object)[()]

    ok = is_zero(val(values["f"]) - f)
    expected = {"x": y + 1, "y": x + 2 * y - 1, "z": sympy.Integer(2)}
    symbols = {"x": x, "y": y, "z": z}
    for v, e in expected.items():
        ok = ok and is_zero(val(cot[v]) - e) and is_zero(val(cot[v]) - sympy.diff(f, symbols[v]))
    # the matrix form: grad_{x,y,z} f = grad_{a,b,c} f  J_F
    a, b, c = (val(values[k]) for k in "abc")
    J = sympy.Matrix([a, b, c]).jacobian([x, y, z])
    row = sympy.Matrix([[val(cot["a"]), val(cot["b"]), val(cot["c"])]]) * J
    ok = ok and all(is_zero(row[k] - expected[v]) for k, v in enumerate("xyz"))
    steps = (
        Step("Build the graph $a = x + y - 2$, $b = y + 1$, $c = 2z$, $f = ab + c$ from the "
             "library's ops (`residual_add`, `shift`, `scale`, `mul`) and evaluate it in "
             "topological order on the exact namespace; the root equals $(x+y-2)(y+1)+2z$."),
        Step("Back-propagate with `nlaverify.graph.core.backprop` from $\\delta_f = 1$: "
             "$\\delta_a = b$, $\\delta_b = a$, $\\delta_c = 1$; $y$ feeds two nodes, so its "
             "error is the sum of two cotangents:",
             r"\frac{\partial f}{\partial x} = y+1,\quad \frac{\partial f}{\partial y} = "
             r"(y+1) + (x+y-2) = x+2y-1,\quad \frac{\partial f}{\partial z} = 2."),
        Step("Each equals `sympy.diff` of $f$, and the matrix form "
             r"$\nabla f_{x,y,z} = \nabla f_{a,b,c}\, J_F$ holds exactly."),
    )
    return Proof("proved" if ok else "failed", steps)


MLP_SIZES = (2, 3, 2, 2)


def derive_mlp() -> Proof:
    xp = get_namespace("sympy")
    d = MLP_SIZES
    Ws = [symbol_array(f"W{k + 1}", (d[k], d[k + 1])) for k in range(len(d) - 1)]
    bs = [symbol_array(f"b{k + 1}", (d[k + 1],)) for k in range(len(d) - 1)]
    x, y = symbol_array("x", (d[0],)), symbol_array("y", (d[-1],))
    eta = np.asarray(mlp_loss(xp, x, y, Ws, bs), dtype=object)[()]
    _, dW, db = mlp_backprop(xp, x, y, Ws, bs)
    checked = 0
    for layer in range(len(Ws)):
        for idx in np.ndindex(*Ws[layer].shape):
            checked += 1
            if not is_zero(dW[layer][idx] - sympy.diff(eta, Ws[layer][idx])):
                return Proof("failed", (), f"dW{layer + 1}{list(idx)} differs")
        for idx in np.ndindex(*bs[layer].shape):
            checked += 1
            if not is_zero(db[layer][idx] - sympy.diff(eta, bs[layer][idx])):
                return Proof("failed", (), f"db{layer + 1}{list(idx)} differs")
    steps = (
        Step(f"Layer sizes {'-'.join(map(str, d))} (the seed's 400-100-100-10 network in small), "
             r"$\sigma = \tanh$ on hidden layers, loss $\eta = \tfrac12\lVert\hat y - y\rVert^2$; "
             "every weight, bias, input and target entry is a symbol."),
        Step("Run `mlp_backprop`, which implements Algorithm 2 with the layer Jacobian "
             "`layer_jacobian`:",
             r"\delta_L = \hat y - y,\quad \delta_{l-1} = J_l^\top\delta_l,\quad "
             r"J_l = W_l^\top\operatorname{diag}(\sigma'(s_{l-1})),\quad "
             r"\frac{\partial\eta}{\partial W_l} = z_{l-1}\delta_l^\top,\quad "
             r"\frac{\partial\eta}{\partial b_l} = \delta_l."),
        Step(f"All {checked} weight and bias derivatives equal `sympy.diff` of the running "
             "`mlp_loss` exactly."),
    )
    return Proof("proved", steps)


register(Identity(
    "graph_example_reverse_mode", "jacobians",
    "Reverse mode on the graph of f(x,y,z) = (x+y-2)(y+1)+2z",
    r"\nabla f = (y+1,\; x+2y-1,\; 2) = \nabla f_{a,b,c}\,J_F",
    "Baggag & Saad §2.6 (eqs. 2.6.1-2.6.6, Figure 8)",
    (qualname(backprop), qualname(evaluate)), derive_graph_example, tags=("backprop",)))
register(Identity(
    "mlp_backprop_recursion", "jacobians", "MLP back-propagation recursion",
    r"\delta_{l-1} = J_l^\top\delta_l,\quad \frac{\partial\eta}{\partial W_l} = "
    r"z_{l-1}\delta_l^\top,\quad \frac{\partial\eta}{\partial b_l} = \delta_l",
    "Baggag & Saad §2.6 (Algorithm 2, Figure 10)",
    (qualname(mlp_backprop), qualname(layer_jacobian)), derive_mlp, tags=("backprop",)))
