/* _torch_backend: hands the torch backend (torch.so, backend = torch) the
 * store of the script's torch.distributed process group, and a way to make
 * gloo groups over it (through Python: Debian's libtorch ships no gloo
 * headers).  ddphook.torch calls attach() before it opens the job. */
#include <dlfcn.h>

#include <stdexcept>
#include <string>

#include <torch/csrc/utils/pybind.h>

#include "backends/torch/torch_attach.h"

namespace py = pybind11;

namespace {

/* The Python callable making a group: kept until the process exits (the
 * backend may make groups until then; never destroyed without the GIL). */
py::object *group_factory = nullptr;

c10::intrusive_ptr<c10d::ProcessGroup>
make_group(void *, const c10::intrusive_ptr<c10d::Store> &store,
           const std::string &prefix, int rank, int size, double timeout_s,
           std::string *error)
{
    py::gil_scoped_acquire gil;
    try {
        py::object pg = (*group_factory)(store, prefix, rank, size, timeout_s);
        return pg.cast<c10::intrusive_ptr<c10d::ProcessGroup>>();
    } catch (const std::exception &e) {
        *error = e.what();
        return {};
    }
}

/* module: the torch backend's path (the one libddphook will load: the
 * same file, so the same copy in this process). */
void attach(const std::string &module, c10::intrusive_ptr<c10d::Store> store,
            int rank, int size, py::object factory)
{
    void *dl = dlopen(module.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!dl)
        throw std::runtime_error("ddphook: cannot load the torch backend: " +
                                 std::string(dlerror()));
    void *sym = dlsym(dl, DDPH_TORCH_ATTACH_SYMBOL);
    if (!sym)
        throw std::runtime_error("ddphook: " + module + " has no " +
                                 DDPH_TORCH_ATTACH_SYMBOL);
    int (*attach_fn)(const ddph_torch_attachment *) = nullptr;
    memcpy(&attach_fn, &sym, sizeof attach_fn);
    if (!group_factory)
        group_factory = new py::object();
    *group_factory = factory;
    ddph_torch_attachment a;
    a.version = DDPH_TORCH_ATTACH_VERSION;
    a.store = store;
    a.rank = rank;
    a.size = size;
    a.make_group = make_group;
    a.user = nullptr;
    if (attach_fn(&a) != 0)
        throw std::runtime_error("ddphook: " + module +
                                 " is another version of the torch backend "
                                 "than this ddphook.torch (reinstall both)");
}

} // namespace

PYBIND11_MODULE(_torch_backend, m)
{
    m.doc() = "ddphook's torch backend: the script's process group's store";
    m.def("attach", &attach, py::arg("module"), py::arg("store"),
          py::arg("rank"), py::arg("size"), py::arg("make_group"));
}
