r"""Proof-page text (:class:`~nlaverify.symbolic.statements.OpText`) of the elementwise,
linear, embedding, norm, softmax, loss and mixture-of-experts ops.

Each JVP statement is the op's own :math:`\dot y = \sum_a \partial f/\partial a\,\dot a`
as its ``<op>_jvp`` function computes it (the formulas of those functions' docstrings).
"""

from __future__ import annotations

from nlaverify.symbolic.op_text import OpText as T

_ROW = (("x", "one row of the input (the features of one token)"),)
_G = (("g", "the row of the cotangent $G$ matching the row $x$"),)
_ELEMENTWISE = ("The op acts entry by entry: its Jacobian is diagonal, so there is no "
                "coupling between distinct entries to exercise, and the check covers "
                "each of the d = 2 entries independently.")
_SOFTMAX_ROW = (("z", "one row of $Z$"), ("p", r"$\operatorname{softmax}(z)$, the row of "
                                                 "probabilities"),
                ("g", "the matching row of the cotangent $G$"))
_MOE = (("x_t", "row $t$ of $X$ (token $t$)"), ("s_t", "row $t$ of the router scores $s$"),
        ("M", "the routing mask (fixed: token t uses experts t and t+1 mod E); not "
              "differentiated"),
        ("g_{te}", r"the gate of expert $e$ for token $t$ (in the statements, not the "
                   r"cotangent); $\bar g$ its cotangent, $\dot g$ its tangent"),
        ("E_e", "expert $e$'s MLP"), ("Y_{e,t}", "expert $e$'s output at token $t$, "
                                                 r"$E_e(x_t)$; $\bar Y_e$ its cotangent"),
        ("W^e", "the slice $e$ of a stacked expert weight"),
        (r"\operatorname{softmax\_vjp}", r"the softmax VJP $p\odot(v - \langle v, p\rangle"
                                         r"\mathbf 1)$ applied row by row"),
        ("G_t", "row $t$ of the cotangent $G$"))
_MOE_DIMS = {"m": "hidden features per expert"}
_MOE_JVP = (r"\dot g_t = g_t\odot\bigl(\dot s_t - \langle\dot s_t, g_t\rangle\mathbf 1\bigr),"
            r"\quad \dot y_t = \textstyle\sum_e\bigl(\dot g_{te}\,Y_{e,t} + g_{te}\,"
            r"\dot Y_{e,t}\bigr)")

OP_TEXT: dict[str, T] = {
    "affine": T("Y", r"Y = XW + \mathbf 1 b^\top",
                r"\dot Y = \dot X W + X\dot W + \mathbf 1\dot b^\top",
                (("G^\\top\\mathbf 1", "the column sums of $G$"),)),
    "lora_linear": T("Y", r"Y = XW + s\,(XA)B",
                     r"\dot Y = \dot X W + X\dot W + s\,(\dot X A B + X\dot A B + XA\dot B)",
                     (("s", "the LoRA scale (static `scale`, 2 in the check)"),
                      ("A, B", "the low-rank factors (rank r)"))),
    "lora_affine": T("Y", r"Y = XW + s\,(XA)B + \mathbf 1 b^\top",
                     r"\dot Y = \dot X W + X\dot W + s\,(\dot X A B + X\dot A B + XA\dot B)"
                     r" + \mathbf 1\dot b^\top",
                     (("s", "the LoRA scale (static `scale`, 2 in the check)"),
                      ("A, B", "the low-rank factors (rank r)"),
                      (r"\text{lora\_linear}", "the same op without the bias $b$"))),
    "embed": T("X", r"X = U W_E,\quad U_{ij} = \mathbb 1[t_i = j]", r"\dot X = U\dot W_E",
               (("U", "the one-hot matrix of the token ids (n x V)"),
                ("t_i", "the id of token $i$ (the check uses $(2i+1) \\bmod V$)"))),
    "add_positions": T("Y", r"Y = X + P", r"\dot Y = \dot X",
                       (("P", "the fixed sinusoidal position table (n x d), a constant"),)),
    "softmax": T("p", r"p = \operatorname{softmax}(z),\quad p_j = \frac{e^{z_j}}"
                      r"{\sum_k e^{z_k}}\ \text{for each row } z \text{ of } Z",
                 r"\dot p = p\odot\bigl(\dot z - \langle p, \dot z\rangle\mathbf 1\bigr)",
                 _SOFTMAX_ROW, {"m": "classes"}),
    "log_softmax": T("y", r"y_j = z_j - \log\textstyle\sum_k e^{z_k}\ \text{for each row } z"
                          r" \text{ of } Z",
                     r"\dot y = \dot z - \langle p, \dot z\rangle\mathbf 1", _SOFTMAX_ROW,
                     {"m": "classes"}),
    "split_heads": T("Y", r"Y_k = X_{:,\,k d_h:(k+1) d_h}\quad (k = 0, \dots, h-1)",
                     r"\dot Y = \operatorname{split}(\dot X)",
                     (("h", "the number of heads (static `n_heads`, 2 in the check)"),
                      ("d_h", "features per head, hd / h"), ("Y_k", "head $k$ of the output"))),
    "merge_heads": T("Y", r"Y = [X_1, \dots, X_h]\ \text{(heads concatenated along the "
                          r"features)}", r"\dot Y = \operatorname{merge}(\dot X)",
                     (("X_k", "head $k$ of the input"),)),
    "split_channels": T("Y", r"Y_{t,k,:} = X_{t,\,k d:(k+1) d}\quad (k = 0, \dots, h-1)",
                        r"\dot Y = \operatorname{split}_h(\dot X)",
                        (("h", "the number of heads (static `n_heads`, 2 in the check)"),
                         ("d", "channels per head, hd / h"),
                         ("t", "the position: the sequence axis stays before the heads"))),
    "merge_channels": T("Y", r"Y_{t,\,k d:(k+1) d} = X_{t,k,:}",
                        r"\dot Y = \operatorname{merge}(\dot X)",
                        (("X_{t,k,:}", "head $k$ of position $t$"),)),
    "concat_last": T("Y", r"Y = [A \mid B]\quad (Y_{\ldots,:a} = A,\ Y_{\ldots,a:} = B)",
                     r"\dot Y = [\dot A \mid \dot B]",
                     (("a", "the last dimension of $A$"),
                      ("A, B", "the per-head part without positions and the rotated part"))),
    "layernorm": T("y", r"\mu = \overline{x},\quad \sigma = \sqrt{\overline{(x-\mu)^2} + "
                        r"\epsilon},\quad \hat x = \frac{x-\mu}{\sigma},\quad y = \gamma\odot"
                        r"\hat x + \beta",
                   r"\dot c = \dot x - \overline{\dot x},\quad \dot y = \frac{\gamma}{\sigma}"
                   r"\odot\bigl(\dot c - \hat x\,\overline{\hat x\odot\dot c}\bigr) + "
                   r"\dot\gamma\odot\hat x + \dot\beta",
                   (*_ROW, *_G, (r"\mu, \sigma", "the mean and the standard deviation (with "
                                                 r"$\epsilon$) of the row $x$"),
                    (r"\hat x", "the normalised row"),
                    (r"g_{\hat x}", r"$g\odot\gamma$, the cotangent of $\hat x$"),
                    (r"\dot c", r"the tangent of the centred row $x - \mu$"),
                    (r"\textstyle\sum", r"in $\bar\gamma, \bar\beta$: the sum over the "
                                        "rows (tokens)"))),
    "rmsnorm": T("y", r"r = \sqrt{\overline{x\odot x} + \epsilon},\quad \hat x = x/r,\quad "
                      r"y = \gamma\odot\hat x",
                 r"\dot y = \frac{\gamma}{r}\odot\bigl(\dot x - \hat x\,\overline{\hat x\odot"
                 r"\dot x}\bigr) + \dot\gamma\odot\hat x",
                 (*_ROW, *_G, ("r", "the root mean square of the row $x$ (with "
                                    r"$\epsilon$)"), (r"\hat x", "the normalised row"),
                  (r"g_{\hat x}", r"$g\odot\gamma$, the cotangent of $\hat x$"),
                  (r"\sum", r"in $\bar\gamma$: the sum over the rows (tokens)"))),
    "relu": T("y", r"y = \max(x, 0)", r"\dot y = \mathbb 1[x>0]\odot\dot x",
              (("g", "the cotangent entry matching $x$"),), note=_ELEMENTWISE),
    "gelu_erf": T("y", r"y = x\,\Phi(x) = \tfrac x2\bigl(1 + \operatorname{erf}(x/\sqrt2)"
                       r"\bigr)", r"\dot y = \bigl(\Phi(x) + x\,\varphi(x)\bigr)\odot\dot x",
                  ((r"\Phi, \varphi", "the standard normal distribution function and "
                                      "density"), ("g", "the cotangent entry matching $x$")),
                  note=_ELEMENTWISE),
    "gelu_tanh": T("y", r"y = \tfrac x2\bigl(1 + \tanh u\bigr),\quad u = \sqrt{2/\pi}\,"
                        r"(x + a x^3)",
                   r"\dot y = \bigl(\tfrac12(1+t) + \tfrac x2(1-t^2)\sqrt{2/\pi}\,(1 + 3a x^2)"
                   r"\bigr)\odot\dot x",
                   (("a", "the constant 0.044715"), ("t", r"$\tanh u$"),
                    ("g", "the cotangent entry matching $x$")), note=_ELEMENTWISE),
    "silu": T("y", r"y = x\,\sigma(x)",
              r"\dot y = \sigma(x)\bigl(1 + x(1-\sigma(x))\bigr)\odot\dot x",
              (("g", "the cotangent entry matching $x$"),), note=_ELEMENTWISE),
    "swiglu": T("y", r"y = \operatorname{SiLU}(a)\odot b",
                r"\dot y = \operatorname{SiLU}'(a)\odot b\odot\dot a + \operatorname{SiLU}(a)"
                r"\odot\dot b",
                (("a, b", "the gate and the up branch ($XW_1$, $XW_3$ in the MLP)"),
                 ("g", "the cotangent entry matching $a$, $b$")), note=_ELEMENTWISE),
    "geglu": T("y", r"y = \operatorname{GELU}_{\tanh}(a)\odot b",
               r"\dot y = \operatorname{GELU}_{\tanh}'(a)\odot b\odot\dot a + "
               r"\operatorname{GELU}_{\tanh}(a)\odot\dot b",
               (("a, b", "the gate and the up branch"),
                ("g", "the cotangent entry matching $a$, $b$")), note=_ELEMENTWISE),
    "residual_add": T("z", r"z = x + y", r"\dot z = \dot x + \dot y"),
    "mul": T("z", r"z = x\odot y", r"\dot z = \dot x\odot y + x\odot\dot y",
             note=_ELEMENTWISE),
    "scale": T("y", r"y = c\,x", r"\dot y = c\,\dot x",
               (("c", "the constant (static `c`, 3 in the check), not differentiated"),)),
    "shift": T("y", r"y = x + c", r"\dot y = \dot x",
               (("c", "the constant (static `c`, -2 in the check), not differentiated"),)),
    "causal_conv1d": T("y", r"y_{t} = b + \textstyle\sum_{j=0}^{k-1} w_{j}\odot x_{t-k+1+j}"
                       r"\ (x_s = 0,\ s < 0)",
                       r"\dot y_t = \textstyle\sum_j (w_j\odot\dot x_{t-k+1+j} + \dot w_j\odot"
                       r" x_{t-k+1+j}) + \dot b",
                       (("w_j", "column $j$ of the depthwise kernel $w$ (one tap per channel)"),
                        ("G", "the cotangent of $y$")), {"k": "taps of the kernel"}),
    "softcap": T("y", r"y = c\tanh(x/c)", r"\dot y = (1 - \tanh^2(x/c))\odot\dot x",
                 (("c", "the cap (static `cap`; a positive symbol in the proof, 2 in the "
                        "numeric checks), not differentiated"),
                  ("g", "the cotangent entry matching $x$")), note=_ELEMENTWISE),
    "softcap_attention": T(
        "A", r"A = \operatorname{softmax}\bigl(c\tanh\bigl(\tfrac{QK^\top}{c\sqrt{d_k}}"
             r"\bigr) + M\bigr)V",
        r"\dot S = \frac{\dot QK^\top + Q\dot K^\top}{\sqrt{d_k}},\ \dot P = P\odot(\dot C"
        r" - \operatorname{rowsum}(\dot C\odot P)),\ \dot C = (1-\tanh^2(S/c))\odot\dot S,"
        r"\ \dot A = \dot PV + P\dot V",
        (("S", r"the scaled scores $QK^\top/\sqrt{d_k}$"),
         ("P", "the attention weights (0 where the mask hides a key)"),
         ("M", r"the causal mask ($-\infty$ above the diagonal), added after the cap"),
         ("c", "the cap (static `cap`, 2 in the check)"), ("G", "the cotangent of $A$"))),
    "linear": T("Y", r"Y = XW", r"\dot Y = \dot X W + X\dot W"),
    "unembed_tied": T("Z", r"Z = X W_E^\top", r"\dot Z = \dot X W_E^\top + X\dot W_E^\top",
                      (("W_E", "the embedding table (V x d), tied as the unembedding"),)),
    "add_learned_positions": T(
        "Y", r"Y = X + W_P[0{:}n]", r"\dot Y = \dot X + \dot W_P[0{:}n]",
        ((r"W_P[0{:}n]", "the first n rows of the position table $W_P$"),)),
    "add_learned_positions_offset": T(
        "Y", r"Y = X + W_P[o{:}o+n]", r"\dot Y = \dot X + \dot W_P[o{:}o+n]",
        ((r"W_P[o{:}o+n]", "rows o to o+n-1 of the position table $W_P$: position p reads "
                           "row p + o (static `offset` o, 2 in the check: OPT)"),)),
    "rope": T("Y", r"Y = X\odot C + R(X)\odot S",
              r"\dot Y = \dot X\odot C + R(\dot X)\odot S",
              (("C, S", r"the tables $\cos(t\theta_i)$, $\sin(t\theta_i)$ at position $t$ "
                        r"for the feature pair $(2i, 2i+1)$, $\theta_i = 10000^{-2i/d_h}$"),
               ("R", r"the pair rotation $(x_{2i}, x_{2i+1}) \mapsto (-x_{2i+1}, x_{2i})$, "
                     r"$R^\top = -R$"))),
    "rope_half": T("Y", r"Y = X\odot C + R(X)\odot S\quad (\text{half layout})",
                   r"\dot Y = \dot X\odot C + R(\dot X)\odot S",
                   (("C, S", r"the tables $\cos(t\theta_i)$, $\sin(t\theta_i)$ at position $t$ "
                             r"for the feature pair $(i, i+d_h/2)$, $\theta_i = "
                             r"500000^{-2i/d_h}$ (Llama-3's base)"),
                    ("R", r"the half rotation $[x_1, x_2] \mapsto [-x_2, x_1]$ on the two "
                          r"halves (Hugging Face's rotate_half, GPT-NeoX), $R^\top = -R$"))),
    "rope_partial": T("Y", r"Y = X\odot C + (R\oplus 0)(X)\odot S\quad (\text{first } r "
                           r"\text{ coordinates rotated})",
                      r"\dot Y = \dot X\odot C + (R\oplus 0)(\dot X)\odot S",
                      (("C, S", r"the tables $\cos(t\theta_i)$, $\sin(t\theta_i)$ for the "
                                r"pair $(i, i+r/2)$, $\theta_i = 10000^{-2i/r}$, $r = 4$ of "
                                r"$d_h = 6$; $C = 1$, $S = 0$ on the last $d_h - r$"),
                       (r"R\oplus 0", r"the half rotation on the first $r$ coordinates, zero "
                                      r"on the rest (GPT-NeoX's rotary_pct), skew")),),
    "rope_scaled": T("Y", r"Y = X\odot C + R(X)\odot S\quad (C, S \text{ at the scaled } "
                          r"\theta_i')",
                     r"\dot Y = \dot X\odot C + R(\dot X)\odot S",
                     (("C, S", r"the tables $\cos(t\theta_i')$, $\sin(t\theta_i')$"),
                      (r"\theta_i'", "the Llama-3.1 scaled frequencies (factor 8, original "
                                     "context 512: one kept, one blended, one divided)"),
                      ("R", r"the pair rotation $(x_{2i}, x_{2i+1}) \mapsto (-x_{2i+1}, "
                            r"x_{2i})$, $R^\top = -R$"))),
    "repeat_kv": T("Y", r"Y_k = X_{\lfloor k/n_{\mathrm{rep}}\rfloor}",
                   r"\dot Y_k = \dot X_{\lfloor k/n_{\mathrm{rep}}\rfloor}",
                   ((r"n_{\mathrm{rep}}", "query heads per key/value head (static `n_rep`, "
                                          "2 in the check)"),
                    ("X_j, Y_k, G_k", "head $j$ of the input, head $k$ of the output and "
                                      "of its cotangent"))),
    "moe": T("y", r"y_t = \textstyle\sum_e g_{te}\,E_e(x_t),\quad g_t = \operatorname{softmax}"
                  r"(s_t + \log M_t),\quad E_e(x) = \operatorname{GELU}_{\tanh}(xW_{\mathrm{in}}"
                  r"^e)W_{\mathrm{out}}^e", _MOE_JVP, _MOE, _MOE_DIMS),
    "moe_swiglu": T("y", r"y_t = \textstyle\sum_e g_{te}\,E_e(x_t),\quad g_t = "
                         r"\operatorname{softmax}(s_t + \log M_t),\quad E_e(x) = "
                         r"(\operatorname{SiLU}(xW_1^e)\odot xW_3^e)W_2^e", _MOE_JVP, _MOE,
                    _MOE_DIMS),
    "moe_topk": T("y", r"y_t = \textstyle\sum_e g_{te}\,E_e(x_t),\quad g_t = M_t\odot"
                       r"\operatorname{softmax}(s_t),\quad E_e(x) = \max(xW_{\mathrm{in}}^e, 0)"
                       r"W_{\mathrm{out}}^e",
                  r"\dot g_t = M_t\odot p_t\odot\bigl(\dot s_t - \langle p_t, \dot s_t\rangle"
                  r"\mathbf 1\bigr),\quad \dot y_t = \textstyle\sum_e\bigl(\dot g_{te}\,Y_{e,t}"
                  r" + g_{te}\,\dot Y_{e,t}\bigr)",
                  (*_MOE, ("p_t", r"$\operatorname{softmax}(s_t)$ over all experts (the "
                                  "gates are not renormalised)"),
                   (r"\operatorname{softmax\_vjp}_p", "the softmax VJP at $p$")), _MOE_DIMS),
    "tanh": T("y", r"y = \tanh x", r"\dot y = (1 - \tanh^2 x)\odot\dot x",
              (("g", "the cotangent entry matching $x$"),), note=_ELEMENTWISE),
    "half_squared_error": T(
        r"\eta", r"\eta = \tfrac12\lVert\hat Y - Y\rVert_F^2",
        r"\dot\eta = \langle\hat Y - Y, \dot{\hat Y}\rangle_F",
        (("Y", "the regression target, not differentiated"),
         ("g", r"the scalar cotangent of the loss $\eta$"),
         (r"\lVert\cdot\rVert_F", "the Frobenius norm")), {"m": "outputs"}),
    "topk_mask": T("M", r"M_{te} = \mathbb 1\bigl[s_{te} \text{ is among the } k \text{ "
                        r"largest entries of } s_t\bigr]", None,
                   (("s_t", "row $t$ of the router scores (not differentiated)"),
                    ("k", "static `top_k`, 2 in the check; ties go to the lower index"))),
    "cross_entropy": T(
        "L", r"L = -\frac1N\textstyle\sum_{i:\,t_i\neq\varnothing}\log p_{i,t_i},\quad "
             r"p_i = \operatorname{softmax}(z_i),\quad N = \#\{i: t_i\neq\varnothing\}",
        r"\dot L = \frac1N\textstyle\sum_i\mathbb 1[t_i\neq\varnothing]\,\langle p_i - y_i, "
        r"\dot z_i\rangle",
        (("z_i", "row $i$ of the logits $Z$"), ("t_i", "the target id of row $i$"),
         ("y_i", "the one-hot row of $t_i$ (zero where $t_i = \\varnothing$)"),
         ("N", "the number of rows with a target"), ("g", "the scalar cotangent of $L$"),
         (r"\bar Z_i", r"row $i$ of $\bar Z$")), {"V": "classes"}),
    "cross_entropy_sum": T(
        "L", r"L = -\textstyle\sum_{i:\,t_i\neq\varnothing}\log p_{i,t_i},\quad "
             r"p_i = \operatorname{softmax}(z_i)",
        r"\dot L = \textstyle\sum_i\mathbb 1[t_i\neq\varnothing]\,\langle p_i - y_i, "
        r"\dot z_i\rangle",
        (("z_i", "row $i$ of the logits $Z$"), ("t_i", "the target id of row $i$"),
         ("y_i", "the one-hot row of $t_i$ (zero where $t_i = \\varnothing$)"),
         ("g", "the scalar cotangent of $L$"),
         (r"\bar Z_i", r"row $i$ of $\bar Z$")), {"V": "classes"}),
}
