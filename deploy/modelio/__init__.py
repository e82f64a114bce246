"""The user's model and its files: building it from its declared source (loading), its
calling convention (adapter), a saved TorchScript module's signature
(torchscript_signature) and ONNX models as directories with external data (onnx_files)."""
