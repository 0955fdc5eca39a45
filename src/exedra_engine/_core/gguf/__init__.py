"""The GGUF header reader, the tensor inventory, quantization names."""
