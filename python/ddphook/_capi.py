"""_capi.py: libddphook's C API (sdk/include/ddphook/ddphook.h) through
ctypes.  ctypes releases the GIL around every call, so Python threads run
while the runtime works."""
import ctypes
import os

try:
    from ._paths import LIBDIR  # written by make (the installed libdir)
except ImportError:  # the source tree of a build made elsewhere
    LIBDIR = None

# ddphook/types.h
F32, F64, F16, BF16 = 0, 1, 2, 3
CPU, CUDA = 0, 1
SUM, MAX, MIN = 0, 1, 2
# ddphook.h: flags of ddph_step_begin_flags
STEP_DEFAULT, STEP_NO_SYNC, STEP_FORCE_SYNC = 0, 1, 2


class BucketInfo(ctypes.Structure):
    _fields_ = [("index", ctypes.c_int), ("nparams", ctypes.c_int),
                ("params", ctypes.POINTER(ctypes.c_int)),
                ("numel", ctypes.c_size_t), ("bytes", ctypes.c_size_t),
                ("dtype", ctypes.c_int), ("device", ctypes.c_int),
                ("hook_calls", ctypes.c_uint64),
                ("bytes_on_wire", ctypes.c_uint64)]


class Stat(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_double)]


_P = ctypes.c_void_p
_I = ctypes.c_int
_S = ctypes.c_char_p
# ddph_bucket_callback(user, model, bucket, status, message): ctypes takes
# the GIL when the communication thread calls it.
BUCKET_CALLBACK = ctypes.CFUNCTYPE(None, _P, _P, _I, _I, _S)
_SIGNATURES = {
    "ddph_strerror": (_S, [_I]),
    "ddph_status_name": (_S, [_I]),
    "ddph_open": (_I, [_S, _P, _P, ctypes.POINTER(_P)]),
    "ddph_close": (_I, [_P]),
    "ddph_abort": (_I, [_P, _S]),
    "ddph_last_error": (_S, [_P]),
    "ddph_check_peers": (_I, [_P, ctypes.POINTER(_I), _I]),
    "ddph_rank": (_I, [_P]),
    "ddph_world_size": (_I, [_P]),
    "ddph_model_create": (_I, [_P, _S, ctypes.POINTER(_P)]),
    "ddph_model_add_param": (_I, [_P, _S, _P, ctypes.POINTER(ctypes.c_int64),
                                  _I, _I, _I, ctypes.POINTER(_I)]),
    "ddph_model_set_param_data": (_I, [_P, _I, _P]),
    "ddph_model_set_bucket_caps": (_I, [_P, ctypes.c_double, ctypes.c_double]),
    "ddph_model_finalize": (_I, [_P]),
    "ddph_model_grad_ptr": (_I, [_P, _I, ctypes.POINTER(_P)]),
    "ddph_model_accumulate_steps": (_I, [_P]),
    "ddph_model_hook_name": (_S, [_P]),
    "ddph_model_bucket_count": (_I, [_P]),
    "ddph_model_bucket_info": (_I, [_P, _I, ctypes.POINTER(BucketInfo)]),
    "ddph_model_bucket_traffic": (_I, [_P, _I,
                                       ctypes.POINTER(ctypes.c_uint64),
                                       ctypes.POINTER(ctypes.c_uint64)]),
    "ddph_model_hook_stats": (_I, [_P, ctypes.POINTER(Stat), ctypes.c_size_t,
                                   ctypes.POINTER(ctypes.c_size_t)]),
    "ddph_step_begin_flags": (_I, [_P, ctypes.POINTER(_P), _I,
                                   ctypes.c_uint]),
    "ddph_model_set_bucket_callback": (_I, [_P, BUCKET_CALLBACK, _P]),
    "ddph_grad_ready": (_I, [_P, _I]),
    "ddph_cuda_device": (_I, [_P]),
    "ddph_set_stream": (_I, [_P, _P]),
    "ddph_cuda_comm_stream": (_P, [_P]),
    "ddph_step_wait": (_I, [_P]),
    "ddph_step_end": (_I, [_P]),
    "ddph_barrier": (_I, [_P]),
    "ddph_allreduce_f64": (_I, [_P, ctypes.POINTER(ctypes.c_double), _I, _I]),
    "ddph_broadcast": (_I, [_P, _P, ctypes.c_size_t, _I]),
    "ddph_state_save": (_I, [_P, _S]),
    "ddph_state_load": (_I, [_P, _S]),
    "ddph_state_check": (_I, [_P, _S]),
    "ddph_state_save_to_memory": (_I, [_P, ctypes.POINTER(_P),
                                       ctypes.POINTER(ctypes.c_size_t)]),
    "ddph_state_free": (None, [_P]),
    "ddph_state_load_from_memory": (_I, [_P, ctypes.c_char_p,
                                         ctypes.c_size_t]),
    "ddph_state_save_id": (_I, [ctypes.c_char_p, ctypes.c_size_t,
                                ctypes.POINTER(ctypes.c_uint64)]),
}


def _candidates():
    """Where libddphook is looked for, first found wins: $DDPHOOK_LIBRARY;
    the build tree this package sits in (python/ddphook beside .libs/);
    the library directory configure chose (_paths.py); the dynamic
    linker's search path."""
    env = os.environ.get("DDPHOOK_LIBRARY")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    top = os.path.dirname(os.path.dirname(here))
    out = [os.path.join(top, ".libs", "libddphook.so")]
    if LIBDIR:
        out.append(os.path.join(LIBDIR, "libddphook.so.1"))
    out.append("libddphook.so.1")
    return out


def load():
    """The library with every signature declared; OSError naming each
    place tried when none loads."""
    tried = []
    for path in _candidates():
        if os.path.isabs(path) and not os.path.exists(path):
            tried.append(path + " (absent)")
            continue
        try:
            lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        return lib
    raise OSError("libddphook not found; tried: " + "; ".join(tried) +
                  " (set DDPHOOK_LIBRARY to the path of libddphook.so)")
