/* ddphook/status.h: status codes shared by the runtime and by plugins.
 *
 * Every fallible ddphook function (runtime API and plugin ABI) returns a
 * ddph_status: 0 on success, a negative code on failure.  Codes are only ever
 * appended; a retired code keeps its number.  The detailed, human-readable
 * message of a failure is available from ddph_last_error() (runtime API) or is
 * set by a plugin through ddph_services.set_error().
 */
#ifndef DDPHOOK_STATUS_H
#define DDPHOOK_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(NAME, value, generic message) */
#define DDPH_STATUS_MAP(X)                                                   \
    X(OK, 0, "success")                                                      \
    X(ERR_INVALID, -1, "invalid argument")                                   \
    X(ERR_NOMEM, -2, "out of memory")                                        \
    X(ERR_IO, -3, "input/output error")                                      \
    X(ERR_CONFIG, -4, "invalid job configuration")                           \
    X(ERR_PLUGIN, -5, "hook plugin could not be loaded")                     \
    X(ERR_ABI, -6, "hook plugin ABI mismatch")                               \
    X(ERR_OPTION, -7, "invalid hook option")                                 \
    X(ERR_HOOK, -8, "communication hook failed")                             \
    X(ERR_BACKEND, -9, "communication backend failed")                       \
    X(ERR_TIMEOUT, -10, "collective did not complete within timeout_s")      \
    X(ERR_MISMATCH, -11, "ranks disagree on the job configuration")          \
    X(ERR_STATE, -12, "call out of order")                                   \
    X(ERR_UNSUPPORTED, -13, "not supported")                                 \
    X(ERR_INSECURE, -14, "plugin location is writable by other users")       \
    X(ERR_TRACE, -15, "invalid gradient trace")                              \
    X(ERR_NONFINITE, -16, "a gradient is NaN or infinite")

typedef enum ddph_status {
#define DDPH__STATUS_ENUM(name, value, msg) DDPH_##name = value,
    DDPH_STATUS_MAP(DDPH__STATUS_ENUM)
#undef DDPH__STATUS_ENUM
} ddph_status;

#ifdef __cplusplus
}
#endif
#endif /* DDPHOOK_STATUS_H */
