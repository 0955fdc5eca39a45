"""GGUF ``general.file_type`` numbers and their quantization names.

llama.cpp's `llama_ftype`; a test checks this table against `gguf.constants.LlamaFileType`
so it cannot drift. Kept here because importing gguf costs ~150 ms and pulls in numpy.
"""

from __future__ import annotations

from typing import Final

from exedra_engine._core.struct import freeze

FILE_TYPES: Final[dict[int, str]] = freeze(
    {
        0: "F32",
        1: "F16",
        2: "Q4_0",
        3: "Q4_1",
        7: "Q8_0",
        8: "Q5_0",
        9: "Q5_1",
        10: "Q2_K",
        11: "Q3_K_S",
        12: "Q3_K_M",
        13: "Q3_K_L",
        14: "Q4_K_S",
        15: "Q4_K_M",
        16: "Q5_K_S",
        17: "Q5_K_M",
        18: "Q6_K",
        19: "IQ2_XXS",
        20: "IQ2_XS",
        21: "Q2_K_S",
        22: "IQ3_XS",
        23: "IQ3_XXS",
        24: "IQ1_S",
        25: "IQ4_NL",
        26: "IQ3_S",
        27: "IQ3_M",
        28: "IQ2_S",
        29: "IQ2_M",
        30: "IQ4_XS",
        31: "IQ1_M",
        32: "BF16",
        36: "TQ1_0",
        37: "TQ2_0",
        38: "MXFP4_MOE",
        39: "NVFP4",
        40: "Q1_0",
        1024: "GUESSED",
    }
)

_REMOVED: Final[dict[int, str]] = freeze(
    {
        4: "Q4_1_SOME_F16",
        5: "Q4_2",
        6: "Q4_3",
        33: "Q4_0_4_4",
        34: "Q4_0_4_8",
        35: "Q4_0_8_8",
    }
)


def quant_name(file_type: int | None) -> str:
    """The quantization name of a ``general.file_type`` value; "" when absent.

    Numbers llama.cpp retired keep their old names; unknown future numbers read ``FT<n>``
    rather than failing, since a newer converter must not make a model uninspectable.
    """
    if file_type is None:
        return ""
    return FILE_TYPES.get(file_type) or _REMOVED.get(file_type) or f"FT{file_type}"
