/* torch_attach.h: how a Python process hands the torch backend its job
 * (C++; python/ddphook/_torch_backend.cc does it before ddph_open).
 *
 * The backend makes gloo groups of its own from the store of the
 * script's process group (never the script's group itself: the script's
 * collectives would interleave with the runtime's).  c10d's gloo group is
 * made through Python (Debian's libtorch ships no gloo headers), by
 * make_group, which takes the GIL. */
#ifndef DDPH_TORCH_ATTACH_H
#define DDPH_TORCH_ATTACH_H

#include <string>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

/* Bumped with any change below. */
#define DDPH_TORCH_ATTACH_VERSION 1

struct ddph_torch_attachment {
    int version; /* DDPH_TORCH_ATTACH_VERSION */
    c10::intrusive_ptr<c10d::Store> store; /* the script's group's */
    int rank, size;                        /* the script's group's */
    /* A gloo group over `store` prefixed by `prefix`; the empty pointer
     * and *error on failure. */
    c10::intrusive_ptr<c10d::ProcessGroup> (*make_group)(
        void *user, const c10::intrusive_ptr<c10d::Store> &store,
        const std::string &prefix, int rank, int size, double timeout_s,
        std::string *error);
    void *user;
};

/* Exported by torch.so: keeps a copy of *a for the next job this process
 * opens (0), or refuses another version (-1). */
extern "C" int ddph_torch_attach_v1(const ddph_torch_attachment *a);
#define DDPH_TORCH_ATTACH_SYMBOL "ddph_torch_attach_v1"

#endif
