"""Text path of LTX-2: Gemma-3 encoder (torchax or host) and the text connectors.

Importing this package does not import torch; the encoder imports it when built.
"""

from ltx2.text.connectors import ConnectorsConfig, LTX2TextConnectors
from ltx2.text.gemma import GemmaTextEncoder, TextEncoderConfig, load_tokenizer

__all__ = ["ConnectorsConfig", "GemmaTextEncoder", "LTX2TextConnectors", "TextEncoderConfig", "load_tokenizer"]
