r"""The language-model weights of a Gemma 3 multimodal checkpoint
(``Gemma3ForConditionalGeneration``, ``model_type: gemma3``), as
:func:`~nlaverify.interop.weights.params_from_hf` reads them (issue 23).

:func:`~nlaverify.interop.hf_config.load_hf_config` reads a ``gemma3`` config as its language
model (``text_config``, a ``gemma3_text``; :mod:`nlaverify.interop.hf_config_gemma3`). Its
weights are stored under other keys than ``Gemma3ForCausalLM``'s. Checked against
``transformers`` 5.25 (``models/gemma3/modeling_gemma3.py`` and ``conversion_mapping.py``,
rules ``"llava"`` and ``"LlavaModel"``), two spellings:

* **saved** (``save_pretrained`` writes it, as the released ``google/gemma-3-*-it`` files do):
  ``language_model.model.{k}`` and ``language_model.lm_head.weight``, ``vision_tower.*``,
  ``multi_modal_projector.*``;
* **in memory** (``Gemma3ForConditionalGeneration.state_dict()``):
  ``model.language_model.{k}``, ``lm_head.weight``, ``model.vision_tower.*``,
  ``model.multi_modal_projector.*``.

The language model's keys are renamed to ``Gemma3ForCausalLM``'s: :math:`\texttt{model.}k`,
``lm_head.weight`` (the same tensors: ``Gemma3Model.forward`` without ``pixel_values`` is
``language_model(inputs_embeds=embed_tokens(input_ids))``, the head and soft cap
``Gemma3ForCausalLM``'s). The vision tower's and the projector's keys are **accepted and
ignored**: they act only on images (``get_image_features``), which nlaverify does not model
(:data:`~nlaverify.interop.hf_config_gemma3.VISION_NOTE`); a text-only forward never reads
them. Any other key of such a state dict (e.g. a ``model.layers.*`` key beside
``language_model.model.*`` ones: two layouts mixed) is refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nlaverify.errors import UnknownNameError

__all__ = ["IGNORED_PARTS", "gemma3_language_model"]

#: (prefix of a multimodal key, the Gemma3ForCausalLM prefix it stands for)
_RENAMES = (("model.language_model.", "model."), ("language_model.model.", "model."),
            ("language_model.lm_head.", "lm_head."), ("lm_head.", "lm_head."))
#: the prefixes of the parts nlaverify ignores (the vision side), in both spellings
IGNORED_PARTS = ("model.vision_tower.", "vision_tower.", "model.multi_modal_projector.",
                 "multi_modal_projector.")
#: a key with one of these prefixes marks a state dict as a Gemma3ForConditionalGeneration's
_MARKS = ("model.language_model.", "language_model.", *IGNORED_PARTS)


class Gemma3Keys:
    """The renaming of one multimodal state dict: ``spell(k)`` gives a missing
    ``Gemma3ForCausalLM`` key ``k`` in the given layout (saved or in memory)."""

    def __init__(self, saved: bool) -> None:
        self.saved = saved

    def spell(self, key: str) -> str:
        """``model.{k}`` as ``language_model.model.{k}`` (saved) or
        ``model.language_model.{k}`` (in memory); ``lm_head.weight`` likewise."""
        if key.startswith("model."):
            rest = key[len("model."):]
            return f"language_model.model.{rest}" if self.saved else \
                f"model.language_model.{rest}"
        return f"language_model.{key}" if self.saved else key


def gemma3_language_model(state: Mapping[str, Any], fn: str
                          ) -> tuple[dict[str, Any], dict[str, str], Gemma3Keys | None]:
    r"""The language model's part of a ``Gemma3ForConditionalGeneration`` state dict, keyed as
    ``Gemma3ForCausalLM``'s (:math:`\texttt{language\_model.model.}k \mapsto
    \texttt{model.}k`; the module docstring lists the rules, from ``transformers`` 5.25
    ``conversion_mapping.py``), the map from each new key to the given one (for error
    messages) and the layout; ``state`` unchanged (``{}``, ``None``) when no key marks it as
    multimodal.

    Raises:
        UnknownNameError: a key of neither layout in a multimodal state dict, or one tensor
            given twice (in both spellings), named.
    """
    if not any(isinstance(k, str) and k.startswith(_MARKS) for k in state):
        return dict(state), {}, None
    saved = any(isinstance(k, str) and k.startswith(("language_model.", "vision_tower.",
                                                      "multi_modal_projector."))
                for k in state)
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for key, value in state.items():
        if not isinstance(key, str):
            raise UnknownNameError(f"{fn}: key {key!r}: expected a string")
        if key.startswith(IGNORED_PARTS):  # the vision side: images only, not modelled
            continue
        new = next((to + key[len(src):] for src, to in _RENAMES if key.startswith(src)), None)
        if new is None:
            raise UnknownNameError(
                f"{fn}: unknown key {key!r} in a Gemma3ForConditionalGeneration state dict: "
                "its language model is under 'language_model.model.' (saved) or "
                "'model.language_model.' (in memory), the vision side under 'vision_tower.' "
                "and 'multi_modal_projector.'; this key is in neither layout")
        if new in out:
            raise UnknownNameError(f"{fn}: key {key!r}: the same tensor is given twice (as "
                                   f"{given[new]!r} too)")
        out[new] = value
        given[new] = key
    return out, given, Gemma3Keys(saved)
