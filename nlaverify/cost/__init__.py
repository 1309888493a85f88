r"""What a model costs, from its graph: FLOPs and bytes per node, per component, per block
and in total; training FLOPs per token against Kaplan et al.'s rules with the dropped terms
named; memory of training and inference; the roofline (Baggag & Saad §3.14; Kaplan et al.
2020, Table 1).

- :mod:`nlaverify.cost.count`: an operation count of an op's own code (its jaxpr);
- :mod:`nlaverify.cost.nodes`: closed forms of the matmul FLOPs, the cost of each node;
- :mod:`nlaverify.cost.summary`: totals, Kaplan's :math:`C_\text{forward}` and :math:`6N`;
- :mod:`nlaverify.cost.memory`: parameters, optimizer state, activations, KV cache, roofline;
- :mod:`nlaverify.cost.report`: :func:`~nlaverify.cost.report.cost_report`, XLA's count;
- :mod:`nlaverify.cost.command`: ``nlaverify cost``.

The package imports nothing itself (the command line stays quick to start): import from
the submodules, e.g. ``from nlaverify.cost.report import cost_report``.
"""
