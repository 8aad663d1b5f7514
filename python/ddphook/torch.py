"""ddphook.torch: a ddphook job's hook as PyTorch DDP's communication hook.

    import ddphook.torch
    ddphook.torch.init_process_group("job.ini")  # gloo: mpiexec or torchrun
    model = torch.nn.parallel.DistributedDataParallel(net)
    model.register_comm_hook(*ddphook.torch.comm_hook("job.ini"))

The job file's plugin (a shipped hook, a wrapper, a third-party .so) runs
on ddphook's communication thread over ddphook's own communicators: MPI's
under mpiexec; under torchrun (or any env:// launcher) gloo groups of the
torch backend, made from the store of the script's process group.
PyTorch's process group only does DDP's construction broadcast.  Each
hook call copies the GradBucket's gradients into the runtime, marks them
ready (so the runtime launches its bucket at once, while autograd goes on
with the earlier layers) and returns a torch.futures.Future.  ddphook's
communication thread completes it as soon as the bucket is reduced
(ddph_model_set_bucket_callback), except the step's last bucket's, which
waits for the end of the step's checks (ddph_step_wait, on a thread of
this module), so that a failure found there still fails DDP's backward
pass.

CUDA models ([runtime] backend = nccl): the gradients stay on the GPU.
Before each step the bridge hands the runtime the stream DDP's hook runs
on (ddph_set_stream), so the copies into ddphook's gradient memory (torch
ops on that stream) come before the runtime's copies into its bucket,
which its communication stream waits for by an event.  The bucket
callback comes once the bucket's results are enqueued on the
communication stream (ddph_cuda_comm_stream), not done: the bridge
enqueues the copies into DDP's bucket there too and completes a CUDA
future (torch.futures.Future(devices=...)), which records an event on
that stream; DDP's stream waits for it only where DDP reads the results
(the end of the backward pass), so the rest of the backward pass overlaps
the hook's work, and nothing waits on the host.  See docs/usage.md,
"PyTorch"."""
import contextlib
import ctypes
import datetime
import os
import queue
import socket
import threading
import time
import warnings

import torch
import torch.distributed as dist

from . import Error, _capi, current_job, lib, open_job, status_name

__all__ = ["comm_hook", "init_process_group", "HookState"]

# HookState.state_dict()'s "format": what load_state_dict() accepts.
_STATE_DICT_FORMAT = "ddphook.torch.HookState.state_dict/1"
# How often rank 0's gathering state_dict reads the job's notices of its
# peers while it waits for their parts (each read is a store round trip).
_PEER_CHECK_S = 0.25

_DTYPES = {torch.float32: _capi.F32, torch.float64: _capi.F64,
           torch.float16: _capi.F16, torch.bfloat16: _capi.BF16}


# The variables of the launchers ddphook's MPI backend runs under.
_MPI_LAUNCHED = ("PMI_RANK", "PMI_SIZE", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE")


def _torch_launched():
    """Started by torchrun or another env:// launcher, not by mpiexec."""
    return (not any(v in os.environ for v in _MPI_LAUNCHED) and
            all(v in os.environ for v in ("RANK", "WORLD_SIZE",
                                          "MASTER_ADDR", "MASTER_PORT")))


def _make_group(store, prefix, rank, size, timeout_s):
    """A gloo group of the torch backend, over the script's store."""
    return dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), rank, size,
                                 datetime.timedelta(seconds=timeout_s))


def _torch_extension():
    """The torch backend's extension: beside this file, or in the build
    tree of the library DDPHOOK_LIBRARY names (a build outside the source
    tree, whose package the tests import from the sources)."""
    try:
        from . import _torch_backend
        return _torch_backend
    except ImportError:
        built = os.environ.get("DDPHOOK_LIBRARY")
        if not built:
            raise
    import glob
    import importlib.util
    where = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
        built))), "python", "ddphook", "_torch_backend.*.so")
    for path in glob.glob(where):
        spec = importlib.util.spec_from_file_location(
            "ddphook._torch_backend", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    raise ImportError("no _torch_backend beside %s nor at %s" % (
        os.path.dirname(__file__), where))


# Set while the bridge opens a job it attached the torch backend for: the
# registry's sign (with torchrun's TORCHELASTIC_RUN_ID) that the torch
# backend runs it.  Never left set: a program this one starts is not.
_ATTACHED = "DDPH_TORCH_ATTACHED"


def _open_job(job_ini):
    """open_job; under torchrun, over the torch backend, which is handed
    the store of the script's process group first: the job's ranks are
    then torch.distributed's."""
    if current_job() is not None or not dist.is_initialized() or \
            not _torch_launched():
        return open_job(job_ini)
    try:
        _torch_backend = _torch_extension()
    except ImportError as e:
        raise Error("ddphook: started by torchrun (no mpiexec), but this "
                    "ddphook has no torch backend (%s): configure it where "
                    "libtorch-dev and pybind11-dev are installed, or launch "
                    "with mpiexec" % e, "DDPH_ERR_UNSUPPORTED")
    try:
        from ._paths import BACKENDDIR
    except ImportError:
        BACKENDDIR = None
    where = os.environ.get("DDPH_BACKEND_DIR") or BACKENDDIR
    if not where:
        raise Error("ddphook: the torch backend's folder is unknown (set "
                    "DDPH_BACKEND_DIR)", "DDPH_ERR_UNSUPPORTED")
    _torch_backend.attach(os.path.join(where, "torch.so"),
                          dist.distributed_c10d._get_default_store(),
                          dist.get_rank(), dist.get_world_size(), _make_group)
    os.environ[_ATTACHED] = "1"
    try:
        return open_job(job_ini)
    finally:
        del os.environ[_ATTACHED]


def init_process_group(job_ini, backend="gloo",
                       timeout=datetime.timedelta(minutes=30)):
    """Opens the job (collective) and starts torch.distributed's default
    process group with ddphook's ranks.  Under mpiexec, rank 0's address
    (MASTER_ADDR, or its host name's address) and a free port
    (MASTER_PORT, or one the system gives) reach every rank through
    ddphook's own broadcast, so mpiexec needs no rendezvous variables.
    Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and no MPI
    launcher), the group starts from those variables and the job runs
    over it (the torch backend).  Returns the job."""
    if _torch_launched() and current_job() is None:
        if not dist.is_initialized():
            dist.init_process_group(backend, init_method="env://",
                                    timeout=timeout)
    job = _open_job(job_ini)
    if dist.is_initialized():
        _same_ranks(job)
        return job
    where = b""
    if job.rank == 0:
        addr = os.environ.get("MASTER_ADDR")
        if not addr:
            try:
                addr = socket.gethostbyname(socket.gethostname())
            except OSError:
                addr = "127.0.0.1"
        port = os.environ.get("MASTER_PORT")
        if not port:
            with socket.socket() as s:
                s.bind(("", 0))
                port = str(s.getsockname()[1])
        where = ("%s %s" % (addr, port)).encode()
    addr, port = job.broadcast_bytes(where, 512).rstrip(b"\0").decode().split()
    dist.init_process_group(backend, init_method="tcp://%s:%s" % (addr, port),
                            rank=job.rank, world_size=job.world_size,
                            timeout=timeout)
    return job


def _same_ranks(job):
    """torch.distributed's ranks must be ddphook's: a job whose ranks
    differ (a launcher that is neither mpiexec nor an env:// one) would
    reduce each rank alone."""
    if not dist.is_initialized():
        return
    if (dist.get_rank(), dist.get_world_size()) != (job.rank, job.world_size):
        raise Error("ddphook: torch.distributed is rank %d of %d but "
                    "ddphook's job is rank %d of %d: launch with "
                    "mpiexec or torchrun (RANK, WORLD_SIZE, MASTER_ADDR and "
                    "MASTER_PORT set), e.g. after "
                    "ddphook.torch.init_process_group(job)" % (
                        dist.get_rank(), dist.get_world_size(), job.rank,
                        job.world_size), "DDPH_ERR_MISMATCH")


def comm_hook(job_ini, model=None, name="model"):
    """The (state, hook) pair for DistributedDataParallel.register_comm_hook:
    the hook of `job_ini` ([hook] or [model.NAME]) on a ddphook model called
    `name`.  Opens the job (collective) unless init_process_group did.

    The parameters are registered at the first backward pass.  With `model`
    (the DDP module, or the module it wraps) they keep their names, and
    their order is the order the first backward pass completes their
    gradients, which is the order DDP rebuilds its buckets in: ddphook's
    buckets are then DDP's: the bridge gives the runtime DDP's caps (the
    module's bucket_bytes_cap and DDP's 1 MiB first bucket; 25 MiB without
    `model`) in place of the job file's.  Without it, DDP's parameter
    order is taken (a backward pass that completes them in another order
    gives other buckets: a warning says so)."""
    job = _open_job(job_ini)
    _same_ranks(job)
    state = HookState(job, name)
    if model is not None:
        cap = getattr(model, "bucket_bytes_cap", None)  # a DDP module's
        if cap:
            state._caps = (state._caps[0], cap / 2.0 ** 20)
        if getattr(model, "static_graph", False):
            # static_graph=True: DDP rebuilds its buckets one step later.
            state._layout_step = 2
        elif getattr(model, "find_unused_parameters", False):
            # DDP never rebuilds them: its first buckets are final.
            state._ddp_layout_final = True
        state._watch(getattr(model, "module", model))
    return state, hook


def hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's communication hook: `state` is comm_hook's HookState."""
    return state._on_bucket(bucket)


def _save_id(part, rank):
    """The save id of rank `rank`'s part (ddph_state_save_id): the same in
    every rank's part of one save; Error for bytes that are not one."""
    sid = ctypes.c_uint64()
    st = lib().ddph_state_save_id(part, len(part), ctypes.byref(sid))
    if st != 0:
        raise Error("ddphook: state_dict: rank %d's part (%d bytes) is not "
                    "an intact ddphook hook state (ddph_state_save_id: %s)"
                    % (rank, len(part), status_name(st)), status_name(st))
    return sid.value


# The gather's keys in its store: each rank's part, and the counters it
# raises once its part is in (read with add(key, 0), never with a wait
# that may time out: torch 1.13's TCPStore server keeps a timed-out
# waiter, and its late answer, when the key comes, is read by the
# client's next call on the shared connection as that call's reply: a
# get then hangs or fails, and so may a gloo or torch-backend call).
_PARTS_IN = "in"


def _part_in_key(rank):
    return "in/%d" % rank


def _forget(store, *keys):
    """Takes keys out of the store (one that cannot delete keeps them)."""
    for key in keys:
        try:
            store.delete_key(key)
        except RuntimeError:
            pass


def _put_part(store, rank, payload):
    """This rank's part (b"S" + bytes, or b"E" + why) for rank 0."""
    store.set(str(rank), payload)
    # The count before the flag: once every flag is up, every count is in.
    store.add(_PARTS_IN, 1)
    store.add(_part_in_key(rank), 1)


def _unwrap(fut):
    """The value, or the exception raised: DDP (C++) then sees an error
    with its message, not an exception object it cannot use as a tensor."""
    return fut.wait()


def _placement(what, device, cuda_device, rank):
    """ddphook's device (_capi.CPU or _capi.CUDA) for `what` (a parameter
    or DDP's bucket, as messages name it) on torch device `device` (index
    resolved), in a job
    whose GPU is `cuda_device` (ddph_cuda_device: -1 without
    backend = nccl), or an Error saying what to change."""
    if device.type == "cpu":
        if cuda_device < 0:
            return _capi.CPU
        raise Error("ddphook: %s is on the CPU but the job's [runtime] "
                    "backend = nccl reduces GPU memory: move the model to "
                    "cuda:%d (rank %d's GPU), or name a host backend" %
                    (what, cuda_device, rank),
                    "DDPH_ERR_UNSUPPORTED")
    if device.type != "cuda":
        raise Error("ddphook: %s is on %s: the PyTorch bridge reduces CPU "
                    "tensors, and CUDA tensors with [runtime] backend = nccl"
                    % (what, device), "DDPH_ERR_UNSUPPORTED")
    if cuda_device < 0:
        raise Error("ddphook: %s is on %s: CUDA tensors go through the "
                    "bridge with [runtime] backend = nccl in the job file "
                    "(this job's backend reduces host memory)" %
                    (what, device), "DDPH_ERR_UNSUPPORTED")
    if device.index != cuda_device:
        raise Error("ddphook: %s is on %s but ddphook runs rank "
                    "%d on cuda:%d (its index among its host's ranks, "
                    "LOCAL_RANK under torchrun, modulo the GPUs it sees): "
                    "call torch.cuda.set_device(%d) before building the "
                    "model, or give each rank one GPU with "
                    "CUDA_VISIBLE_DEVICES" % (what, device, rank,
                                              cuda_device, cuda_device),
                    "DDPH_ERR_MISMATCH")
    return _capi.CUDA


def _resolved(device):
    """`device` with its index: torch.device("cuda") is the current one."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


class _Entry:
    """One GradBucket of the step, until its future is completed."""
    __slots__ = ("fut", "buffer", "params", "grads", "index", "last",
                 "buckets")

    def __init__(self, bucket):
        self.buffer = bucket.buffer()
        # A CUDA future: set_result records an event on the stream current
        # at the time (the communication stream), and DDP's reads wait for
        # it on DDP's stream.
        self.fut = torch.futures.Future(devices=[self.buffer.device]) \
            if self.buffer.device.type == "cuda" else torch.futures.Future()
        self.params = bucket.parameters()
        self.grads = bucket.gradients()
        self.index = bucket.index()
        self.last = bucket.is_last()
        self.buckets = frozenset()  # ddphook's buckets of its parameters


class HookState:
    """The hook's state: one ddphook model whose parameters are DDP's, its
    gradient memory, and the step in progress.  Steps, iterations and the
    hook's per-bucket state are the runtime's, as for a C trainer."""

    def __init__(self, job, name):
        self.job = job
        self.name = name
        self.model = None  # ddph_model *, once the parameters are known
        self.params = []
        self.index = {}    # id(parameter) -> ddphook's parameter index
        self.grads = []    # per parameter: a flat tensor over the memory
                           # the runtime reads gradients from
        self.steps = 0     # synchronised steps completed
        self.bridge_s = 0.0  # seconds spent copying gradients in and out
        self._early = []   # the first step's buckets, before the model
        self._pending = []  # launched, future not completed yet
        # Shared with the communication thread's callback (_bucket_done):
        self._lock = threading.Lock()
        self._done = set()   # ddphook's buckets reduced this step
        self._failures = {}  # ... and those that failed: bucket -> Error
        self._bucket_of = []  # per parameter: its ddphook bucket
        self.completed_by_comm_thread = 0  # DDP futures, all steps
        self._step_open = False
        self._end_pending = False  # step waited, ddph_step_end not yet run
        self._load_path = None
        self._load_bytes = None  # load_state_dict's, before the first step
        self._state_dicts = 0  # state_dict() calls: the store's keys
        # state.save() paths, written collectively at the next step's
        # first bucket (or by flush(), load() or the job's close).
        self._saves_pending = []
        job.before_close.append(self._flush_at_close)
        self._warned_layout = False
        self._layout_step = 1  # the step DDP's buckets are rebuilt by
        self._ddp_layout_final = False  # find_unused_parameters=True
        self._idle = threading.Event()
        self._idle.set()
        self._work = queue.Queue()
        self._waiter = threading.Thread(target=self._wait_loop, daemon=True,
                                        name="ddphook-step-wait")
        self._waiter.start()
        # DDP's bucket caps in MiB (first, others), given to the runtime
        # so that its buckets are the GradBuckets DDP hands the hook.
        self._caps = (dist._DEFAULT_FIRST_BUCKET_BYTES / 2.0 ** 20, 25.0)
        self._names = {}   # id(parameter) -> its name, from _watch
        self._ready = {}   # id(parameter), in the order gradients came
        self._watches = []
        # Created now, so that the job's [model.NAME] sections find it
        # before the first step of any model; finalized at the first
        # backward pass, when DDP's parameters are known.
        model = ctypes.c_void_p()
        job.check(lib().ddph_model_create(job.ctx, name.encode(),
                                          ctypes.byref(model)),
                  "model '%s'" % name)
        self._created = model
        self.device = None  # the GPU of a CUDA model (backend = nccl)
        self._comm = None   # ... and ddphook's communication stream there
        # Kept referenced: the runtime calls it until the job is closed.
        self._callback = _capi.BUCKET_CALLBACK(self._bucket_done)
        job.check(lib().ddph_model_set_bucket_callback(model, self._callback,
                                                       None),
                  "model '%s': bucket callback" % name)
        # The job's [accumulate] steps (or [model.NAME] accumulate_steps):
        # DDP calls the hook only on the backward passes it synchronises,
        # so the trainer runs the others under DDP's no_sync().
        self.accumulate_steps = lib().ddph_model_accumulate_steps(model)

    # ---- the parameters ------------------------------------------------

    def _watch(self, module):
        """Names and the first backward pass's order, from the module; and
        the end of each step before the next forward pass (after the
        optimizer, before the parameters are used again)."""
        module.register_forward_pre_hook(lambda mod, inputs: self.step_end())
        for pname, p in module.named_parameters():
            if p.requires_grad:
                self._names[id(p)] = pname
                self._watches.append(p.register_hook(
                    lambda grad, key=id(p): self._ready.setdefault(key)))

    def _build(self, params):
        job = self.job
        model = self._created
        for h in self._watches:
            h.remove()
        self._watches = []
        cuda_device = lib().ddph_cuda_device(job.ctx)
        for i, p in enumerate(params):
            pname = self._names.get(id(p), "param%d" % i)
            where = _placement("parameter '%s'" % pname, _resolved(p.device),
                               cuda_device, job.rank)
            if where == _capi.CUDA and self.device is None:
                self.device = p.device
            if p.dtype not in _DTYPES:
                raise Error("ddphook: parameter '%s' has dtype %s (float32, "
                            "float64, float16 or bfloat16 only)" %
                            (pname, p.dtype), "DDPH_ERR_UNSUPPORTED")
            shape = list(p.shape) or [1]
            g = torch.zeros(p.numel(), dtype=p.dtype, device=p.device)
            job.check(lib().ddph_model_add_param(
                model, pname.encode(), ctypes.c_void_p(g.data_ptr()),
                (ctypes.c_int64 * len(shape))(*shape), len(shape),
                _DTYPES[p.dtype], where, None), "parameter '%s'" % pname)
            self.grads.append(g)
            # For hooks that average parameters (on_step_end), replica
            # checks and the broadcast at finalize (DDP made them equal
            # already): the parameter's own memory, which in-place
            # optimizers keep.
            if p.is_contiguous():
                job.check(lib().ddph_model_set_param_data(
                    model, i, ctypes.c_void_p(p.data_ptr())),
                    "parameter '%s'" % pname)
        job.check(lib().ddph_model_set_bucket_caps(model, *self._caps),
                  "bucket caps")
        job.check(lib().ddph_model_finalize(model), "finalize")
        # With gradient_as_bucket_view the runtime owns the memory.
        for i, g in enumerate(self.grads):
            ptr = ctypes.c_void_p()
            job.check(lib().ddph_model_grad_ptr(model, i, ctypes.byref(ptr)),
                      "grad_ptr")
            if ptr.value != g.data_ptr():
                if g.device.type == "cuda":
                    raise Error("ddphook: [runtime] gradient_as_bucket_view "
                                "with CUDA parameters: not through the "
                                "PyTorch bridge (DDP's own "
                                "gradient_as_bucket_view=True is fine)",
                                "DDPH_ERR_UNSUPPORTED")
                raw = (ctypes.c_char * (g.numel() * g.element_size())) \
                    .from_address(ptr.value)
                self.grads[i] = torch.frombuffer(raw, dtype=g.dtype)
        self.params = list(params)
        self.index = {id(p): i for i, p in enumerate(self.params)}
        self._bucket_of = [0] * len(self.params)
        for b, members in enumerate(self._layout(model)):
            for i in members:
                self._bucket_of[i] = b
        if self.device is not None:
            # Where the runtime enqueues the results (ddph_cuda_comm_stream):
            # the bridge's copies into DDP's buckets go there too.
            self._comm = torch.cuda.ExternalStream(
                lib().ddph_cuda_comm_stream(job.ctx), device=self.device)
        self.model = model
        if self._load_path is not None:
            path, self._load_path = self._load_path, None
            self._load_now(path)
        if self._load_bytes is not None:
            data, self._load_bytes = self._load_bytes, None
            self._load_memory(data)

    # ---- the hook ---------------------------------------------------------

    def _on_bucket(self, bucket):
        if self.job.failed is not None:
            raise Error("ddphook: the job has failed: %s" % self.job.failed)
        entry = _Entry(bucket)
        try:
            _placement("DDP's bucket %d" % entry.index,
                       _resolved(entry.buffer.device),
                       lib().ddph_cuda_device(self.job.ctx), self.job.rank)
        except Error as err:
            self._abort(err)
            raise
        self._check_own(entry)
        entries = [entry]
        if self.model is None:
            # The first step: every bucket is needed before the parameters
            # are registered in DDP's order (the last bucket holds the first).
            self._early.append(entry)
            if not bucket.is_last():
                return entry.fut.then(_unwrap)
            entries, self._early = sorted(self._early, key=lambda e: e.index), []
            params = [p for e in reversed(entries) for p in e.params]
            by_id = {id(p): p for p in params}
            if self._ddp_layout_final:
                params = self._take_ddp_layout(entries)
            elif self._ready and set(self._ready) <= set(by_id):
                # Registered last-ready first: ddphook walks them back.
                # Parameters that got no gradient (static_graph=True's
                # unused ones) follow in DDP's order, as in DDP's rebuild.
                order = list(self._ready) + [
                    k for k in self._names if k in by_id and
                    k not in self._ready]
                if len(order) == len(by_id):
                    params = [by_id[k] for k in reversed(order)]
            try:
                self._build(params)
            except BaseException as exc:
                self._abort(exc)
                raise
        try:
            for e in entries:
                self._launch(e)
        except BaseException as exc:
            self._abort(exc)
            raise
        if bucket.is_last():
            self._idle.clear()
            self._work.put(True)
        return entry.fut.then(_unwrap)

    def _take_ddp_layout(self, entries):
        """DDP's buckets of find_unused_parameters=True (filled forward in
        registration order, then reversed, and never rebuilt), as
        ddphook's: registered so that ddphook's walk meets them bucket
        by bucket, bucket 0 closing at its own size, the others at DDP's
        cap as DDP closed them (with DDP's first cap above its cap, the
        layout check at step 1 may still warn)."""
        walk = [p for e in entries for p in e.params]
        first = sum(p.numel() * p.element_size() for p in entries[0].params)
        if first > 0:
            self._caps = (first / 2.0 ** 20, self._caps[1])
        return list(reversed(walk))

    def _check_own(self, entry):
        """A bucket of this state's DDP model, or a clear Error (one state
        per DDP model: its parameters are registered once)."""
        if self.model is not None:
            foreign = [p for p in entry.params if id(p) not in self.index]
        elif self._names:  # comm_hook(model=): its parameters are known
            foreign = [p for p in entry.params if id(p) not in self._names]
        else:
            return
        if foreign:
            err = Error(
                "ddphook: DDP model bucket %d holds %d parameter%s that are "
                "not those of the model '%s' this hook state serves: one "
                "comm_hook pair serves one DDP model; register "
                "ddphook.torch.comm_hook(job, model=ddp_model, name=NAME) "
                "with a name of its own on each DDP model (rank %d)" % (
                    entry.index, len(foreign),
                    "" if len(foreign) == 1 else "s", self.name,
                    self.job.rank), "DDPH_ERR_STATE")
            self._abort(err)
            raise err

    def _launch(self, e):
        job = self.job
        if not self._step_open:
            # One step at a time in a job: the last one (this model's or
            # another's) ends first.
            if getattr(job, "step_to_end", None) is not None:
                job.step_to_end.step_end()
            # Between steps on every rank: the saves asked for since.
            self._commit_saves("the step after state.save()")
            if self.device is not None:
                # DDP's stream (the hook's): the copies below are enqueued
                # on it, and the runtime's work is ordered after them.
                job.check(lib().ddph_set_stream(job.ctx, ctypes.c_void_p(
                    torch.cuda.current_stream(self.device).cuda_stream)),
                    "set_stream")
            models = (ctypes.c_void_p * 1)(self.model)
            job.check(lib().ddph_step_begin_flags(job.ctx, models, 1,
                                                  _capi.STEP_FORCE_SYNC),
                      "step_begin")
            self._step_open = True
        indices = [self.index[id(p)] for p in e.params]
        if self.steps == self._layout_step and not self._warned_layout:
            self._check_layout(e.index, indices)
        e.buckets = frozenset(self._bucket_of[i] for i in indices)
        with self._lock:  # before its buckets can be done
            self._pending.append(e)
        t0 = time.perf_counter()
        for i, g in zip(indices, e.grads):
            self.grads[i].copy_(g.reshape(-1))
            job.check(lib().ddph_grad_ready(self.model, i), "grad_ready")
        self.bridge_s += time.perf_counter() - t0

    def _check_layout(self, index, indices):
        """Once: DDP's rebuilt bucket against ddphook's bucket of the same
        index (the hook runs on ddphook's)."""
        info = _capi.BucketInfo()
        same = (index < lib().ddph_model_bucket_count(self.model) and
                lib().ddph_model_bucket_info(self.model, index,
                                             ctypes.byref(info)) == 0 and
                info.params[:info.nparams] == indices)
        if not same:
            self._warned_layout = True
            if self.job.rank == 0:
                warnings.warn(
                    "ddphook: DDP's bucket %d holds other parameters than "
                    "ddphook's bucket %d; the hook runs on ddphook's buckets "
                    "([runtime] bucket_cap_mb and first_bucket_cap_mb against "
                    "DDP's bucket_cap_mb and its 1 MiB first bucket)" %
                    (index, index))

    def _abort(self, exc):
        """A failure in a hook call (perhaps in the middle of a step): the
        job fails on every rank at once, naming this rank and the cause
        (the peers would wait for this rank's buckets); the process then
        exits non-zero even if the script catches the exception."""
        self.job.abort("its hook call failed: %s" % (
            str(exc) or type(exc).__name__))
        try:
            self.job.close()
        except Error:
            pass

    def _bucket_done(self, _user, _model, bucket, status, message):
        """ddph_model_set_bucket_callback, on ddphook's communication
        thread (holding the GIL, no lock of the runtime): completes the
        futures of DDP's buckets whose every ddphook bucket is reduced,
        but the step's last (_finish).  Fast: a copy per parameter."""
        ready = []
        try:
            with self._lock:
                self._done.add(bucket)
                if status != 0:
                    self._failures[bucket] = Error("ddphook: %s" % (
                        (message or b"").decode(errors="replace") or
                        status_name(status)), status_name(status))
                ready = [e for e in self._pending
                         if not e.last and e.buckets <= self._done]
                for e in ready:
                    self._pending.remove(e)
                self.completed_by_comm_thread += len(ready)
            for e in ready:
                self._complete(e)
        except BaseException as exc:  # never leave DDP waiting
            for e in ready:
                if not e.fut.done():
                    e.fut.set_exception(exc)

    def _complete(self, e):
        """e's results into DDP's bucket, or the failure of its buckets."""
        failed = [self._failures[b] for b in sorted(e.buckets)
                  if b in self._failures]
        if failed:
            e.fut.set_exception(failed[0])
            return
        t0 = time.perf_counter()
        # On a GPU, after the bucket's results on the communication
        # stream; set_result records the future's event there.
        with contextlib.nullcontext() if self._comm is None else \
                torch.cuda.stream(self._comm):
            for p, g in zip(e.params, e.grads):
                g.copy_(self.grads[self.index[id(p)]].view_as(g))
            self.bridge_s += time.perf_counter() - t0
            e.fut.set_result(e.buffer)

    def _wait_loop(self):
        while self._work.get():
            try:
                self._finish()
            except BaseException as exc:  # never leave DDP waiting
                for e in self._pending:
                    if not e.fut.done():
                        e.fut.set_exception(exc)
            finally:
                with self._lock:
                    self._pending = []
                    self._done.clear()
                    self._failures.clear()
                self._idle.set()

    def _finish(self):
        """On this module's thread: the end of the step (its every bucket
        callback has returned when ddph_step_wait does), then the last
        bucket's future."""
        job = self.job
        st = lib().ddph_step_wait(job.ctx)
        self._step_open = False
        if st != 0:
            message = job.last_error()
            if job.failed is None:
                job.failed = message
            err = Error("ddphook: %s" % message, status_name(st))
            for e in self._pending:
                e.fut.set_exception(err)
            return
        self.steps += 1
        self._end_pending = True
        job.step_to_end = self
        for e in self._pending:
            self._complete(e)

    # ---- between steps -----------------------------------------------------

    def step_end(self):
        """Ends the last step (ddph_step_end: the hook's on_step_end, e.g.
        post-local-SGD's parameter averaging, and [runtime]
        check_replicas_every).  Runs by itself before the next forward pass
        (with comm_hook's model=) or the next backward pass; call it after
        optimizer.step() to have it at once."""
        if not self._end_pending:
            return
        self._idle.wait()
        self._end_pending = False
        self.job.step_to_end = None
        self.job.check(lib().ddph_step_end(self.job.ctx), "step_end")

    def _between_steps(self, what):
        self._idle.wait()
        self.step_end()
        if self._step_open or self._early:
            raise Error("ddphook: %s: only between steps" % what,
                        "DDPH_ERR_STATE")
        self.job._usable()

    def save(self, path):
        """Asks for the hook's state (PowerSGD's error feedback and Q, ...)
        as it is now to be saved to `path` (PATH.rank<R> on every rank).
        Call it on every rank, between steps, where the script saves its
        checkpoint.  Returns `path` at once, with no collective, so that it
        adds no ordering to the script's own torch.distributed calls: the
        ranks write it together (ddph_state_save) at the first bucket of
        the next synchronised step, before anything of that step (the
        state written is the one of this call), or at flush(), load() or
        the job's close, whichever comes first.  A failure of that save
        raises ddphook.Error there on every rank."""
        self._idle.wait()
        if self._step_open or self._early:
            raise Error("ddphook: save: only between steps", "DDPH_ERR_STATE")
        if self.job.failed is not None or self.job.closed:
            raise Error("ddphook: save %s: the job has failed or is closed%s"
                        % (path, ": " + self.job.failed if self.job.failed
                           else ""), "DDPH_ERR_STATE")
        # What the deferred save will refuse first, refused now.
        st = lib().ddph_state_check(self.job.ctx, path.encode())
        if st != 0:
            raise Error("ddphook: save %s: %s"
                        % (path, self.job.last_error()), status_name(st))
        self._mark_pending(path)
        self._saves_pending.append(path)
        return path

    # A save asked for and not written yet leaves PATH.rank<R>.pending
    # until it is: a job that stops in between (preempted before its next
    # step) must not resume from PATH's older state beside the newer
    # checkpoint the script saved with it; load() refuses it.
    def _pending_marker(self, path):
        return "%s.rank%d.pending" % (path, self.job.rank)

    def _mark_pending(self, path):
        marker = self._pending_marker(path)
        try:
            fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC |
                         os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write("state.save(%r) asked for at %s by pid %d; not "
                        "written yet\n" % (path, datetime.datetime.now()
                                            .isoformat(timespec="seconds"),
                                            os.getpid()))
        except OSError as e:
            raise Error("ddphook: save %s: cannot write %s: %s"
                        % (path, marker, e.strerror), "DDPH_ERR_IO")

    def _load_now(self, path):
        """ddph_state_load, unless this rank's last save of `path` was
        never written: then the job fails on every rank (ddph_abort: the
        peers are in the load's collectives), saying so."""
        marker = self._pending_marker(path)
        if os.path.lexists(marker):
            why = ("load %s: state.save() of it was asked for but never "
                   "written (the job stopped before its next step), so its "
                   "hook state is older than the checkpoint saved with it; "
                   "resume from an earlier checkpoint, or remove %s to load "
                   "the older hook state knowingly" % (path, marker))
            self.job.abort(why)
            raise Error("ddphook: " + why, "DDPH_ERR_STATE")
        self.job.check(lib().ddph_state_load(self.job.ctx, path.encode()),
                       "load %s" % path)

    def flush(self):
        """Writes the saves asked for and not written yet, now (collective:
        every rank calls it).  Raises Error on every rank if one fails."""
        self._between_steps("flush")
        self._commit_saves("state.flush()")

    def _flush_at_close(self):
        if self._saves_pending:
            self.flush()

    def _commit_saves(self, where):
        """The pending saves, every rank at the same point of the job."""
        if not self._saves_pending:
            return
        paths, self._saves_pending = self._saves_pending, []
        if self.model is None:
            raise Error("ddphook: save %s: no backward pass has run, so the "
                        "hook has no state to write yet (its parameters are "
                        "registered at the first one)" % paths[0],
                        "DDPH_ERR_STATE")
        for path in paths:
            self.job.check(lib().ddph_state_save(self.job.ctx,
                                                 path.encode()),
                           "save %s (asked for by state.save(), written at %s)"
                           % (path, where))
            try:
                os.unlink(self._pending_marker(path))
            except FileNotFoundError:
                pass

    def load(self, path):
        """Loads a state saved by save() (collective); before the first
        step it is applied when the parameters are registered.  Saves asked
        for before it are written first."""
        self._between_steps("load")
        if self.model is None:
            if self._saves_pending:
                self._commit_saves("state.load()")  # raises: no state yet
            self._load_path, self._load_bytes = path, None
            return
        self._commit_saves("state.load()")
        self._load_now(path)

    # ---- checkpoints as PyTorch keeps them ------------------------------

    def state_dict(self, gather=True, timeout=datetime.timedelta(minutes=5)):
        """The hook's state as it is now, for the dict a script gives
        torch.save: call it on every rank, between steps (where save()
        would be called).  Each rank's part is its own state (PowerSGD's
        error feedback differs per rank), in the bytes of its state file
        (ddph_state_save_to_memory), taken at the call.

        gather=True: rank 0's dict holds every rank's part, so that a
        rank-0 checkpoint restores every rank exactly.  No collective: the
        other ranks hand their part to the store of torch.distributed's
        default group and return at once; rank 0 waits (at most
        `timeout`) until each of them has called state_dict(), and never
        for anything else, so the script's own collectives need no new
        order (rank 0 may evaluate through the DDP model first).  The
        other ranks' dicts hold their own part.  gather=False: every
        rank's dict holds its own part only (a checkpoint per rank).

        Before the first backward pass it is what load_state_dict() was
        given (applied at that pass)."""
        self._between_steps("state_dict")
        rank, world = self.job.rank, self.job.world_size
        gather = gather and world > 1
        seq = self._state_dicts
        self._state_dicts += 1
        # The job's number too: a part an earlier job left in the store
        # (its gather timed out) is not this job's.
        store = dist.PrefixStore(
            "ddphook/state_dict/%d/%s/%d/" % (self.job.number, self.name, seq),
            dist.distributed_c10d._get_default_store()) if gather else None
        try:
            mine = self._own_state("state_dict")
        except Error as e:
            if gather and rank != 0:  # rank 0 must not wait for it
                _put_part(store, rank, b"E" + str(e).encode())
            raise
        parts = {rank: mine}
        if gather and rank != 0:
            _put_part(store, rank, b"S" + mine)
        elif gather:
            parts.update(self._collect(store, world, timeout))
            want = _save_id(mine, rank)
            other = sorted(r for r, p in parts.items()
                           if _save_id(p, r) != want)
            if other:
                raise Error("ddphook: state_dict: the part%s of rank%s %s "
                            "%s taken by another call than rank 0's (each "
                            "rank's calls are paired by their number: call "
                            "state.state_dict() at the same steps on every "
                            "rank)" % (
                                "s" if len(other) > 1 else "",
                                "s" if len(other) > 1 else "",
                                ", ".join(map(str, other)),
                                "were" if len(other) > 1 else "was"),
                            "DDPH_ERR_MISMATCH")
        return {"format": _STATE_DICT_FORMAT, "world_size": world,
                "model": self.name, "hook": self.hook_name(),
                "ranks": parts}

    def _own_state(self, what):
        """This rank's state as bytes (ddph_state_save_to_memory); before
        the first backward pass, the bytes load_state_dict() was given."""
        if self.model is None:
            if self._load_bytes is not None:
                return self._load_bytes
            raise Error("ddphook: %s: no backward pass has run, so the hook "
                        "has no state yet (its parameters are registered at "
                        "the first one)" % what, "DDPH_ERR_STATE")
        data, size = ctypes.c_void_p(), ctypes.c_size_t()
        self.job.check(lib().ddph_state_save_to_memory(
            self.job.ctx, ctypes.byref(data), ctypes.byref(size)), what)
        try:
            return ctypes.string_at(data, size.value)
        finally:
            lib().ddph_state_free(data)

    def _collect(self, store, world, timeout):
        """On rank 0: the other ranks' parts from the store, each taken
        out of it once read."""
        keys = [str(r) for r in range(1, world)]
        self._wait_for_parts(store, range(1, world), timeout)
        parts = {}
        for k in keys:
            value = store.get(k)  # in the store: no waiting
            _forget(store, k, _part_in_key(int(k)))
            if value[:1] != b"S":
                raise Error("ddphook: state_dict: rank %s could not take "
                            "its part: %s" % (
                                k, value[1:].decode(errors="replace")),
                            "DDPH_ERR_STATE")
            parts[int(k)] = value[1:]
        return parts

    def _wait_for_parts(self, store, ranks, timeout):
        """Waits (at most `timeout`) until every one of `ranks` has put its
        part in the store; every quarter second it reads the job's notices
        of the ranks still missing (ddph_check_peers), so that a rank that
        failed or closed the job is named at once instead of at the
        timeout.  It polls counters: no wait on the store that may time
        out (_PARTS_IN says why)."""
        start = time.monotonic()
        deadline = start + timeout.total_seconds()
        next_check = start + _PEER_CHECK_S
        pause = 0.001
        while store.add(_PARTS_IN, 0) < len(ranks):
            now = time.monotonic()
            if now >= next_check or now >= deadline:
                missing = [r for r in ranks
                           if store.add(_part_in_key(r), 0) == 0]
                if not missing:
                    break
                self._stop_for_missing(missing, timeout, now >= deadline)
                next_check = now + _PEER_CHECK_S
            time.sleep(pause)
            pause = min(2 * pause, 0.02)
        _forget(store, _PARTS_IN)

    def _stop_for_missing(self, missing, timeout, timed_out):
        """Raises when a missing rank failed or closed its job (a rank that
        gave its part and then closed is done, not gone), or at the
        timeout."""
        names = ", ".join(map(str, missing))
        plural = "s" if len(missing) > 1 else ""
        ranks = (ctypes.c_int * len(missing))(*missing)
        st = lib().ddph_check_peers(self.job.ctx, ranks, len(missing))
        if st != 0:
            why = lib().ddph_last_error(self.job.ctx).decode(errors="replace")
            raise Error("ddphook: state_dict: rank 0 stopped waiting for "
                        "rank%s %s to call state.state_dict(): %s" %
                        (plural, names, why), status_name(st))
        if timed_out:
            raise Error("ddphook: state_dict: rank 0 waited %s for rank%s %s "
                        "to call state.state_dict(): call it on every rank, "
                        "at the same step (only rank 0 waits, for that call "
                        "alone)" % (timeout, plural, names),
                        "DDPH_ERR_TIMEOUT")

    def load_state_dict(self, state_dict):
        """Loads what state_dict() returned (torch.load's copy of it): call
        it on every rank, between steps, with a dict that holds this
        rank's part (rank 0's gathered one holds every rank's); before the
        first step it is applied when the parameters are registered.
        Collective, as load(): a dict of another world size is refused at
        once; one of another model or hook, another layout, or damaged
        bytes, on every rank (ddph_state_load_from_memory's checks)."""
        self._between_steps("load_state_dict")
        if not isinstance(state_dict, dict) or \
                state_dict.get("format") != _STATE_DICT_FORMAT:
            raise Error("ddphook: load_state_dict: not a dict made by "
                        "ddphook.torch.HookState.state_dict() (format %s)" %
                        _STATE_DICT_FORMAT, "DDPH_ERR_INVALID")
        world = state_dict.get("world_size")
        if world != self.job.world_size:
            raise Error("ddphook: load_state_dict: the state dict was taken "
                        "in a job of %s ranks; this job has %d: each rank's "
                        "hook state (PowerSGD's error feedback) belongs to "
                        "its rank, and does not carry over to another world "
                        "size" % (world, self.job.world_size),
                        "DDPH_ERR_MISMATCH")
        mine = state_dict.get("ranks", {}).get(self.job.rank)
        if not isinstance(mine, bytes):
            why = ("load_state_dict: the state dict holds the hook state of "
                   "rank%s %s, not rank %d's: load rank 0's gathered dict "
                   "(state_dict(gather=True)) or this rank's own" % (
                       "s" if len(state_dict.get("ranks", {})) != 1 else "",
                       sorted(state_dict.get("ranks", {})), self.job.rank))
            # The other ranks may hold theirs, and be in the load.
            self.job.abort(why)
            raise Error("ddphook: " + why, "DDPH_ERR_MISMATCH")
        self._commit_saves("state.load_state_dict()")
        if self.model is None:
            self._load_path, self._load_bytes = None, mine
            return
        self._load_memory(mine)

    def _load_memory(self, data):
        self.job.check(lib().ddph_state_load_from_memory(
            self.job.ctx, data, len(data)), "load_state_dict")

    def hook_name(self):
        return lib().ddph_model_hook_name(self.model).decode() \
            if self.model else None

    def bytes_sent(self):
        """Bytes this rank sent in the hook's collectives, all steps."""
        total = 0
        for b in range(lib().ddph_model_bucket_count(self.model)
                       if self.model else 0):
            sent, received = ctypes.c_uint64(), ctypes.c_uint64()
            self.job.check(lib().ddph_model_bucket_traffic(
                self.model, b, ctypes.byref(sent), ctypes.byref(received)),
                "bucket_traffic")
            total += sent.value
        return total

    def hook_stats(self):
        """The hook's own statistics, e.g. PowerSGD's compression."""
        if not self.model:
            return {}
        out = (_capi.Stat * 64)()
        n = ctypes.c_size_t()
        self.job.check(lib().ddph_model_hook_stats(self.model, out, 64,
                                                   ctypes.byref(n)),
                       "hook_stats")
        return {out[i].name.decode(): out[i].value
                for i in range(min(n.value, 64))}

    def buckets(self):
        """ddphook's bucket layout: per bucket, DDP's parameter indices."""
        return self._layout(self.model) if self.model else []

    def _layout(self, model):
        layout = []
        for b in range(lib().ddph_model_bucket_count(model)):
            info = _capi.BucketInfo()
            self.job.check(lib().ddph_model_bucket_info(model, b,
                                                        ctypes.byref(info)),
                           "bucket_info")
            layout.append(info.params[:info.nparams])
        return layout
