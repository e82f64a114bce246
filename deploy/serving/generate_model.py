"""Triton python-backend model that generates: token ids in, the tokens after them out,
over the step graph beside it (model.onnx with ONNX Runtime, or an OpenVINO IR) and the
generate loop beside that (decode_loop.py, the file deploy's in-process generation runs).

`triton_config` copies this file verbatim as `<version>/model.py` of a decoder's
`<model>_generate` (one response with every token) and `<model>_generate_stream`
(decoupled: one response per token, then the final flag) models. The `deploy_generate`
parameter (serving/generate_record.py) says the cache's shape and the limits.

Each request runs in its own thread with its own cache: several sequences are in flight at
once and none sees another's tokens (ONNX Runtime's session is shared, OpenVINO gets one
infer request per sequence). Settings a request leaves out: greedy, max_new_tokens from
the record, no stop token.
"""

import json
import os
import sys
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        folder = os.path.join(args["model_repository"], args["model_version"])
        sys.path.insert(0, folder)  # decode_loop.py, copied beside this file
        import decode_loop

        self.loop = decode_loop
        self.record = json.loads(config["parameters"]["deploy_generate"]["string_value"])
        self.cache = decode_loop.CacheShape(
            self.record["layers"],
            self.record["heads"],
            self.record["head_dim"],
            self.record["dtype"],
            self.record["past"],
        )
        self.step = _step(folder, self.record["model_file"])
        self.tokenizer = _tokenizer(folder, self.record.get("tokenizer"))
        self.threads = []

    def execute(self, requests):
        if self.record["stream"]:
            for request in requests:  # answered from their threads, as tokens come
                thread = threading.Thread(target=self._stream, args=(request,), daemon=True)
                thread.start()
                self.threads.append(thread)
            self.threads = [t for t in self.threads if t.is_alive()]
            return None
        answers = [None] * len(requests)
        workers = [threading.Thread(target=self._whole, args=(r, answers, i)) for i, r in enumerate(requests)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        return answers

    def _whole(self, request, answers, index):
        try:
            tokens = self._generate(request, None)
            text = self.tokenizer.decode(tokens) if self.tokenizer is not None else None
            answers[index] = pb_utils.InferenceResponse(output_tensors=_outputs(tokens, text))
        except Exception as exc:  # this request gets the error, the others their tokens
            answers[index] = pb_utils.InferenceResponse(error=_error(exc))

    def _stream(self, request):
        sender = request.get_response_sender()
        pieces = _Pieces(self.tokenizer)

        def send(token):
            if sender.is_cancelled():  # the client went away: stop spending the cores on it
                raise _Cancelled()
            said = pieces.add(token)
            sender.send(pb_utils.InferenceResponse(output_tensors=_outputs([token], said)))

        try:
            self._generate(request, send)
            rest = pieces.rest()
            if rest:  # the end of a character the last token left incomplete
                sender.send(pb_utils.InferenceResponse(output_tensors=_outputs([], rest)))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except _Cancelled:
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        except Exception as exc:
            sender.send(
                pb_utils.InferenceResponse(error=_error(exc)),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )

    def _prompt(self, request):
        """input_ids, or with a tokenizer the ids of `text` (exactly one of them)."""
        ids = pb_utils.get_input_tensor_by_name(request, "input_ids")
        text = pb_utils.get_input_tensor_by_name(request, "text")
        if (ids is None) == (text is None):
            accepted = "input_ids or text" if self.tokenizer is not None else "input_ids"
            raise ValueError(f"give {accepted}, one of them")
        if ids is not None:
            return ids.as_numpy().reshape(-1)
        sentence = text.as_numpy().reshape(-1)[0]
        sentence = sentence.decode("utf-8") if isinstance(sentence, bytes) else str(sentence)
        return np.asarray(self.tokenizer.encode(sentence).ids, dtype=np.int64)

    def _generate(self, request, on_token):
        prompt = self._prompt(request)
        vocab = self.record.get("vocab")
        if vocab and len(prompt) and int(max(prompt)) >= vocab:  # ONNX Runtime's Gather error said no more
            raise ValueError(
                f"token id {int(max(prompt))} in the prompt: this model takes ids 0..{vocab - 1} "
                "(input_ids' value_range in its config)"
            )
        sampling = self._sampling(request, self.record["max_context"] - len(prompt))
        if len(prompt) + sampling.max_new_tokens > self.record["max_context"]:
            raise ValueError(
                f"prompt ({len(prompt)} tokens) + max_new_tokens ({sampling.max_new_tokens}) is over the "
                f"{self.record['max_context']} this model was exported for"
            )
        return self.loop.generate(self.step(), prompt, self.cache, sampling, on_token)

    def _sampling(self, request, room):
        """`room`: the new tokens the prompt leaves in the exported context; a request that
        asks for no number gets max_new_tokens or that room, whichever is less."""

        def given(name, cast, default):
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            return default if tensor is None else cast(tensor.as_numpy().reshape(-1)[0])

        most = self.record["max_new_tokens"]
        asked = given("max_new_tokens", int, max(1, min(most, room)))
        if not 1 <= asked <= most:
            raise ValueError(f"max_new_tokens is {asked}: this model generates 1..{most}")
        stop = pb_utils.get_input_tensor_by_name(request, "stop_ids")
        return self.loop.Sampling(
            max_new_tokens=asked,
            temperature=given("temperature", float, 0.0),
            top_k=given("top_k", int, 0),
            top_p=given("top_p", float, 1.0),
            seed=given("seed", int, None),
            stop=tuple(
                int(t)
                for t in (stop.as_numpy().reshape(-1) if stop is not None else self.record.get("stop", []))
            ),
        )

    def finalize(self):
        for thread in self.threads:
            thread.join(timeout=5)


def _error(exc):
    """A request's own mistake (ValueError: ids, counts, an empty prompt) is the client's:
    INVALID_ARGUMENT; anything else stays INTERNAL."""
    if isinstance(exc, ValueError):
        return pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
    return pb_utils.TritonError(str(exc))


def _outputs(tokens, text):
    """output_ids, and output_text where the model has a tokenizer (`text` None without one)."""
    found = [pb_utils.Tensor("output_ids", np.asarray(tokens, dtype=np.int64))]
    if text is not None:
        found.append(pb_utils.Tensor("output_text", np.asarray([text.encode("utf-8")], dtype=object)))
    return found


class _Cancelled(Exception):
    pass


class _Pieces:
    """The text of a stream's tokens, piece by piece: what each new token adds to the
    decoded whole (held back while the whole ends in an incomplete character)."""

    def __init__(self, tokenizer):
        self.tokenizer, self.tokens, self.said = tokenizer, [], ""

    def add(self, token):
        if self.tokenizer is None:
            return None
        self.tokens.append(token)
        whole = self.tokenizer.decode(self.tokens)
        if whole.endswith("\ufffd") or not whole.startswith(self.said):
            return ""
        piece, self.said = whole[len(self.said) :], whole
        return piece

    def rest(self):
        if self.tokenizer is None:
            return ""
        whole = self.tokenizer.decode(self.tokens)
        return whole[len(self.said) :] if whole.startswith(self.said) else ""


def _tokenizer(folder, filename):
    if not filename:
        return None
    from tokenizers import Tokenizer

    return Tokenizer.from_file(os.path.join(folder, filename))


def _step(folder, filename):
    """A factory of step functions: one per sequence (OpenVINO's infer request is not shared)."""
    path = os.path.join(folder, filename)
    if filename.endswith(".xml"):
        import openvino as ov

        compiled = ov.Core().compile_model(
            path, "CPU", {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": "f32"}
        )

        def per_sequence():
            request = compiled.create_infer_request()
            return lambda feeds: [np.array(v) for v in request.infer(feeds).values()]

        return per_sequence
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return lambda: lambda feeds: session.run(None, feeds)
