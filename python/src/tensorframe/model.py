"""Language models and sentence encoders from GGUF (and Hugging Face
safetensors) files: the model library (tensorframe/model.h) from Python.

    from tensorframe import model
    m = model.load("SmolLM2-135M-Instruct.Q4_1.gguf", device="auto")
    print(m.chat([{"role": "user", "content": "What is the capital of France?"}]))
    for piece in m.generate("Once upon a time", max_tokens=32, stream=True):
        print(piece, end="", flush=True)
    ids = m.tokenize("Hello")                   # list of ints
    e = model.load("all-MiniLM-L6-v2/model.safetensors").embed(["a sentence", "another"])   # [2, 384] Array
    ctx = m.context(n_ctx=512, n_seq=4)         # a KV cache for batched decoding
    logits = ctx.decode([1, 2, 3], seq=[0, 0, 1], logits=[False, True, True])   # tensorframe Array

Generation samples on the host with a seeded generator, so the same seed
gives the same text on every device. Errors are the package's exceptions
(tensorframe.TensorframeError and its kin) with the library's message.
"""
import ctypes

from . import _lib
from ._array import Array

__all__ = ["Model", "Context", "load", "chat_template_name"]

_c = ctypes
_P = _c.c_void_p


def _load_library():
    path = _lib.library_dir() / "libtensorframe_model.so"
    return _c.CDLL(str(path))


_m = _load_library()


def _declare(name, restype, *argtypes):
    f = getattr(_m, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


class _Params(_c.Structure):
    _fields_ = [("device", _c.c_char_p), ("weights", _c.c_int), ("n_ctx", _c.c_int64), ("n_seq", _c.c_int64),
                ("allow_split", _c.c_bool), ("split_device", _c.c_char_p)]


class _Info(_c.Structure):
    _fields_ = [("architecture", _c.c_char_p), ("name", _c.c_char_p), ("device", _c.c_char_p),
                ("n_layer", _c.c_int64), ("n_embd", _c.c_int64), ("n_ff", _c.c_int64), ("n_head", _c.c_int64),
                ("n_head_kv", _c.c_int64), ("head_dim", _c.c_int64), ("n_vocab", _c.c_int64),
                ("n_ctx_train", _c.c_int64), ("sliding_window", _c.c_int64), ("n_layer_on_device", _c.c_int64),
                ("split_device", _c.c_char_p), ("weight_bytes", _c.c_uint64),
                ("has_tokenizer", _c.c_bool), ("bos", _c.c_int32), ("eos", _c.c_int32), ("add_bos", _c.c_bool),
                ("chat_template", _c.c_char_p)]


class _Message(_c.Structure):
    _fields_ = [("role", _c.c_char_p), ("content", _c.c_char_p)]


class _Batch(_c.Structure):
    _fields_ = [("ids", _c.POINTER(_c.c_int32)), ("pos", _c.POINTER(_c.c_int64)), ("seq", _c.POINTER(_c.c_int32)),
                ("logits", _c.POINTER(_c.c_bool)), ("n", _c.c_int64)]


class _SamplerParams(_c.Structure):
    _fields_ = [("temperature", _c.c_double), ("top_k", _c.c_int64), ("top_p", _c.c_double), ("min_p", _c.c_double),
                ("repeat_penalty", _c.c_double), ("frequency_penalty", _c.c_double),
                ("presence_penalty", _c.c_double), ("penalty_last_n", _c.c_int64), ("seed", _c.c_uint64)]


class _Pending(_c.Structure):
    _fields_ = [("bytes", _c.c_char * 4), ("n", _c.c_int)]


_S = _c.c_int
_last_error = _declare("tf_model_last_error", _c.c_char_p)
_default_params = _declare("tf_model_default_params", _Params)
_load = _declare("tf_model_load", _S, _c.c_char_p, _c.POINTER(_Params), _c.POINTER(_P))
_free = _declare("tf_model_free", None, _P)
_get_info = _declare("tf_model_get_info", _S, _P, _c.POINTER(_Info))
_tokenize = _declare("tf_model_tokenize", _S, _P, _c.c_char_p, _c.c_size_t, _c.c_bool, _c.c_bool,
                     _c.POINTER(_c.POINTER(_c.c_int32)), _c.POINTER(_c.c_int64))
_token_bytes = _declare("tf_model_token_bytes", _S, _P, _c.c_int32, _c.POINTER(_c.c_void_p), _c.POINTER(_c.c_size_t))
_is_end = _declare("tf_model_token_is_end", _c.c_bool, _P, _c.c_int32)
_detokenize = _declare("tf_model_detokenize", _S, _P, _c.c_int32, _c.POINTER(_Pending), _c.c_char_p, _c.c_size_t,
                       _c.POINTER(_c.c_size_t))
_detect = _declare("tf_chat_template_detect", _S, _c.c_char_p, _c.POINTER(_c.c_char_p))
_chat_apply = _declare("tf_model_chat_apply", _S, _P, _c.c_char_p, _c.POINTER(_Message), _c.c_size_t, _c.c_bool,
                       _c.POINTER(_c.c_void_p))
_ctx_new = _declare("tf_model_context_new", _S, _P, _c.c_int64, _c.c_int64, _c.POINTER(_P))
_ctx_free = _declare("tf_model_context_free", None, _P)
_ctx_used = _declare("tf_model_context_used", _c.c_int64, _P)
_seq_pos_max = _declare("tf_model_seq_pos_max", _c.c_int64, _P, _c.c_int32)
_seq_rm = _declare("tf_model_seq_rm", _S, _P, _c.c_int32, _c.c_int64, _c.c_int64)
_seq_cp = _declare("tf_model_seq_cp", _S, _P, _c.c_int32, _c.c_int32, _c.c_int64, _c.c_int64)
_decode = _declare("tf_model_decode", _S, _P, _c.POINTER(_Batch), _c.POINTER(_P))
_embed = _declare("tf_model_embed", _S, _P, _c.POINTER(_c.c_char_p), _c.c_int64, _c.c_int, _c.c_bool, _c.POINTER(_P))
_sampler_defaults = _declare("tf_sampler_default_params", _SamplerParams)
_sampler_new = _declare("tf_sampler_new", _S, _c.POINTER(_SamplerParams), _c.POINTER(_P))
_sampler_free = _declare("tf_sampler_free", None, _P)
_sampler_sample = _declare("tf_sampler_sample", _S, _P, _P, _c.c_int64, _c.POINTER(_c.c_int32))
_sampler_accept = _declare("tf_sampler_accept", _S, _P, _c.c_int32)
_libc = _c.CDLL(None)
_libc.free.argtypes = [_c.c_void_p]
_libc.free.restype = None


def _check(code):
    """The model library's failure as the package's exception."""
    if code != 0:
        status = _lib.lib.tf_status_name(code).decode()
        message = (_last_error() or b"").decode(errors="replace")
        raise _lib._ERROR_CLASSES.get(status, _lib.TensorframeError)(status, code, message)


def _text(value, what):
    if isinstance(value, str):
        value = value.encode("utf-8")
    if not isinstance(value, bytes):
        raise TypeError("tensorframe.model: %s is a str, not %s" % (what, type(value).__name__))
    if b"\0" in value:
        raise ValueError("tensorframe.model: %s holds a NUL character" % what)
    return value


def _int_array(ctype, values, what):
    values = [int(v) for v in values]
    bits = _c.sizeof(ctype) * 8
    for v in values:
        if not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
            raise OverflowError("tensorframe.model: %s %d does not fit %d bits" % (what, v, bits))
    return (ctype * max(1, len(values)))(*values)


def chat_template_name(template):
    """The format a Jinja chat template (or a format's name) is recognized as."""
    name = _c.c_char_p()
    _check(_detect(_text(template, "the template"), _c.byref(name)))
    return name.value.decode()


class Model:
    """A GGUF model loaded onto a device: load() makes one."""

    def __init__(self, path, device="auto", weights=None, n_ctx=0, allow_split=False, split_device=None):
        params = _default_params()
        params.device = _text(device, "the device")
        params.allow_split = bool(allow_split)
        if split_device is not None:
            params.split_device = _text(split_device, "the split device")
        if weights is not None:          # default: as stored
            from . import _dtypes
            names = {"float32": _dtypes.float32, "float16": _dtypes.float16, "bfloat16": _dtypes.bfloat16}
            dt = names.get(weights, weights)
            if dt not in (_dtypes.float32, _dtypes.float16, _dtypes.bfloat16):
                raise ValueError("tensorframe.model: weights are kept as stored (None) or decoded to float32, "
                                 "float16 or bfloat16, not %r" % (weights,))
            params.weights = dt.code
        params.n_ctx = int(n_ctx)
        handle = _P()
        _check(_load(_text(str(path), "the path"), _c.byref(params), _c.byref(handle)))
        self._h = handle

    def __del__(self):
        if getattr(self, "_h", None):
            _free(self._h)
            self._h = None

    @property
    def info(self):
        """The model's facts: architecture, sizes, vocabulary, special tokens, chat template."""
        i = _Info()
        _check(_get_info(self._h, _c.byref(i)))
        out = {f: getattr(i, f) for f, _ in _Info._fields_}
        for k in ("architecture", "name", "device", "chat_template", "split_device"):
            out[k] = out[k].decode(errors="replace") if out[k] is not None else None
        return out

    # ---- tokens ----

    def tokenize(self, text, add_special=True, parse_special=True):
        data = _text(text, "the text")
        ids, n = _c.POINTER(_c.c_int32)(), _c.c_int64()
        _check(_tokenize(self._h, data, len(data), add_special, parse_special, _c.byref(ids), _c.byref(n)))
        try:
            return [ids[i] for i in range(n.value)]
        finally:
            _libc.free(ids)

    def token_bytes(self, token):
        ptr, n = _c.c_void_p(), _c.c_size_t()
        _check(_token_bytes(self._h, int(token), _c.byref(ptr), _c.byref(n)))
        return _c.string_at(ptr, n.value) if n.value else b""

    def detokenize(self, ids):
        """The text of ids (bytes joined, then decoded: a character split
        across tokens comes out whole; invalid UTF-8 is replaced)."""
        return b"".join(self.token_bytes(t) for t in ids).decode("utf-8", errors="replace")

    def is_end(self, token):
        return bool(_is_end(self._h, int(token)))

    # ---- embeddings ----

    def embed(self, texts, pooling="default", normalize=True):
        """Sentence embeddings of a list of texts: an [n, n_embd] float32 Array.
        Encoders (BERT) pool their last layer (the model's pooling by default,
        mean for sentence-transformers); decoders their final hidden state
        (the last token by default). pooling: default, mean, cls or last."""
        codes = {"default": 0, "mean": 1, "cls": 2, "last": 3}
        if pooling not in codes:
            raise ValueError("tensorframe.model: pooling is one of %s" % ", ".join(codes))
        if isinstance(texts, (str, bytes)):
            texts = [texts]
        data = [_text(t, "a text") for t in texts]
        arr = (_c.c_char_p * max(1, len(data)))(*data)
        out = _P()
        _check(_embed(self._h, arr, len(data), codes[pooling], bool(normalize), _c.byref(out)))
        return Array._wrap(out.value)

    # ---- chat ----

    def chat_apply(self, messages, template=None, add_assistant=True):
        """The conversation as the model's chat template (or the named
        format, or a Jinja text) writes it."""
        msgs = (_Message * max(1, len(messages)))()
        keep = []
        for i, m in enumerate(messages):
            role, content = _text(m["role"], "a role"), _text(m["content"], "a message")
            keep += [role, content]
            msgs[i].role, msgs[i].content = role, content
        out = _c.c_void_p()
        tmpl = None if template is None else _text(template, "the template")
        _check(_chat_apply(self._h, tmpl, msgs, len(messages), add_assistant, _c.byref(out)))
        try:
            return _c.string_at(out).decode("utf-8")
        finally:
            _libc.free(out)

    def chat(self, messages, template=None, **kw):
        """The assistant's answer to a conversation (a str, or its pieces when stream=True)."""
        return self.generate(self.chat_apply(messages, template), parse_special=True, **kw)

    # ---- generation ----

    def context(self, n_ctx=2048, n_seq=1):
        return Context(self, n_ctx, n_seq)

    def generate(self, prompt, max_tokens=64, temperature=0.0, top_k=40, top_p=0.95, min_p=0.05,
                 repeat_penalty=1.0, frequency_penalty=0.0, presence_penalty=0.0, penalty_last_n=64, seed=0,
                 stream=False, n_ctx=None, parse_special=True):
        """Text continuing `prompt` (a str, or a list of token ids), until an
        end-of-turn token or max_tokens. temperature 0 is greedy."""
        ids = self.tokenize(prompt, True, parse_special) if isinstance(prompt, (str, bytes)) else [int(t) for t in prompt]
        if not ids:
            raise ValueError("tensorframe.model: the prompt has no tokens")
        ctx = Context(self, n_ctx or len(ids) + max_tokens + 1, 1)
        sampler = _Sampler(temperature, top_k, top_p, min_p, repeat_penalty, frequency_penalty, presence_penalty,
                           penalty_last_n, seed)
        pieces = self._pieces(ctx, sampler, ids, max_tokens)
        return pieces if stream else "".join(pieces)

    def _pieces(self, ctx, sampler, ids, max_tokens):
        for t in ids:
            sampler.accept(t)
        pending, buf, n = _Pending(), _c.create_string_buffer(64), _c.c_size_t()
        logits = ctx.decode(ids)
        for _ in range(max_tokens):
            token = sampler.sample(logits)
            if self.is_end(token):
                break
            _check(_detokenize(self._h, token, _c.byref(pending), buf, len(buf), _c.byref(n)))
            if n.value:
                yield buf.raw[:n.value].decode("utf-8", errors="replace")
            if ctx.used >= ctx.n_ctx:
                break
            logits = ctx.decode([token])


class _Sampler:
    def __init__(self, temperature, top_k, top_p, min_p, repeat_penalty, frequency_penalty, presence_penalty,
                 penalty_last_n, seed):
        p = _sampler_defaults()
        p.temperature, p.top_k, p.top_p, p.min_p = float(temperature), int(top_k), float(top_p), float(min_p)
        p.repeat_penalty, p.frequency_penalty = float(repeat_penalty), float(frequency_penalty)
        p.presence_penalty, p.penalty_last_n, p.seed = float(presence_penalty), int(penalty_last_n), int(seed)
        h = _P()
        _check(_sampler_new(_c.byref(p), _c.byref(h)))
        self._h = h

    def __del__(self):
        if getattr(self, "_h", None):
            _sampler_free(self._h)
            self._h = None

    def accept(self, token):
        _check(_sampler_accept(self._h, int(token)))

    def sample(self, logits, row=0):
        out = _c.c_int32()
        _check(_sampler_sample(self._h, logits._h, int(row), _c.byref(out)))
        return out.value


class Context:
    """A KV cache of n_ctx cells shared by n_seq sequences; decode() runs a batch."""

    def __init__(self, model, n_ctx=2048, n_seq=1):
        self.model, self.n_ctx = model, int(n_ctx)
        h = _P()
        _check(_ctx_new(model._h, int(n_ctx), int(n_seq), _c.byref(h)))
        self._h = h

    def __del__(self):
        if getattr(self, "_h", None):
            _ctx_free(self._h)
            self._h = None

    @property
    def used(self):
        return _ctx_used(self._h)

    def seq_pos_max(self, seq):
        return _seq_pos_max(self._h, int(seq))

    def seq_rm(self, seq, p0=0, p1=-1):
        _check(_seq_rm(self._h, int(seq), int(p0), int(p1)))

    def seq_cp(self, src, dst, p0=0, p1=-1):
        _check(_seq_cp(self._h, int(src), int(dst), int(p0), int(p1)))

    def decode(self, ids, pos=None, seq=None, logits=None):
        """One forward over a batch; the logits ([rows wanted, n_vocab] f32
        Array) of the entries whose `logits` flag is set (default: the last)."""
        n = len(ids)
        b = _Batch()
        b.n = n
        arrays = [_int_array(_c.c_int32, ids, "a token")]
        b.ids = arrays[0]
        if pos is not None:
            arrays.append(_int_array(_c.c_int64, pos, "a position"))
            b.pos = arrays[-1]
        if seq is not None:
            arrays.append(_int_array(_c.c_int32, seq, "a sequence"))
            b.seq = arrays[-1]
        if logits is not None:
            flags = (_c.c_bool * max(1, n))(*[bool(x) for x in logits])
            arrays.append(flags)
            b.logits = flags
        for name, a in (("pos", pos), ("seq", seq), ("logits", logits)):
            if a is not None and len(a) != n:
                raise ValueError("tensorframe.model: %d ids but %d %s entries" % (n, len(a), name))
        out = _P()
        _check(_decode(self._h, _c.byref(b), _c.byref(out)))
        return Array._wrap(out.value)


def load(path, device="auto", weights=None, n_ctx=0, allow_split=False, split_device=None):
    """A GGUF model on `device` ("auto", "cpu", "cuda:0", ...), weights as
    stored (or decoded to weights="float32"/"float16"/"bfloat16"). When
    the device lacks the memory for the weights and a cache of n_ctx cells:
    an OutOfMemoryError naming both figures, or with allow_split its first
    layers there and the rest on split_device (default "cpu")."""
    return Model(path, device, weights, n_ctx, allow_split, split_device)
