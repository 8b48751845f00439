"""Pure functions turning input structure into ETC attention masks and relative labels.

- :mod:`.labels`         the one relative-label vocabulary (:class:`RelativeLabelVocab`)
- :mod:`.global_tokens`  global token roles (:class:`GlobalTokenType`) and their dictionary id
- :mod:`.builders`       structure ids -> 4 masks + 4 label-id tensors (:func:`build_structure`); the rules,
                         written once as elementwise functions of (batch, query, key)
- :mod:`.flex_plan`      structure ids -> one batch's FlexAttention plan (the same rules inside the kernel)
"""

from .builders import (
    MAX_HIERARCHY_DEPTH,
    REQUIRED_STRUCTURE_LABELS,
    GlobalLocalStructure,
    build_structure,
    fixed_block_ids,
    segment_ids_from_lengths,
)
from .global_tokens import (
    MIRROR_TYPES,
    NUM_GLOBAL_TOKEN_TYPES,
    GlobalTokenType,
    global_token_id,
    special_global_token_id,
)
from .labels import DEFAULT_STRUCTURE_LABELS, OFFICIAL_STRUCTURE_LABELS, RelativeLabelVocab

__all__ = [
    "DEFAULT_STRUCTURE_LABELS",
    "OFFICIAL_STRUCTURE_LABELS",
    "RelativeLabelVocab",
    "GlobalTokenType",
    "NUM_GLOBAL_TOKEN_TYPES",
    "MIRROR_TYPES",
    "special_global_token_id",
    "global_token_id",
    "MAX_HIERARCHY_DEPTH",
    "REQUIRED_STRUCTURE_LABELS",
    "GlobalLocalStructure",
    "build_structure",
    "fixed_block_ids",
    "segment_ids_from_lengths",
]
