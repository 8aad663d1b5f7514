/* unit_loader.c: the loader's error matrix against the fake plugins, the
 * shipped allreduce plugin, hook options validated against a schema, and
 * the bucket layout as older plugins read it.
 * Every message is asserted, not only the status. */
#include "build-config.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ddphook/plugin_util.h>

#include "support/config.h"
#include "plugin/abi_released.h"
#include "plugin/hook.h"
#include "plugin/loader.h"
#include "plugin/options.h"
#include "unit.h"

static char fake_path[512];

static const char *fake(const char *name)
{
    snprintf(fake_path, sizeof fake_path, "%s/%s.so",
             unit_env("DDPH_TEST_FAKE_DIR"), name);
    return fake_path;
}

static void expect_load_error(const char *name_or_path, const char *dirs,
                              ddph_status want, const char *needle)
{
    ddph_plugin *p = NULL;
    ddph_err e;
    ck_assert_int_eq(ddph__plugin_load(name_or_path, dirs, 1, &p, &e), want);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(e.msg, needle), "'%s' lacks '%s'", e.msg, needle);
}

START_TEST(shipped_allreduce_loads_by_name)
{
    ddph_plugin *p;
    ddph_err e;
    ck_assert_int_eq(ddph__plugin_load("allreduce",
                                       unit_env("DDPH_TEST_PLUGIN_DIR"), 0, &p,
                                       &e),
                     DDPH_OK);
    ck_assert_str_eq(p->api.name, "allreduce");
    ck_assert_uint_eq(p->api.abi_major, 1);
    ck_assert_uint_eq(p->plugin_size, sizeof(ddph_plugin_api_v1));
    ddph__plugin_unload(p);
}
END_TEST

/* A job whose models load one plugin twice, then another: ld.so knows the
 * second load of the first plugin by its descriptor's name as well, so
 * that descriptor must not be reused for the third (which would come back
 * as the first plugin). */
START_TEST(same_plugin_twice_then_another)
{
    const char *dir = unit_env("DDPH_TEST_PLUGIN_DIR");
    ddph_plugin *a, *b, *c;
    ddph_err e;
    ck_assert_int_eq(ddph__plugin_load("allreduce", dir, 0, &a, &e), DDPH_OK);
    ck_assert_int_eq(ddph__plugin_load("allreduce", dir, 0, &b, &e), DDPH_OK);
    ck_assert_msg(ddph__plugin_load("fp16", dir, 0, &c, &e) == DDPH_OK, "%s",
                  e.msg);
    ck_assert_str_eq(c->api.name, "fp16");
    ddph__plugin_unload(c);
    ddph__plugin_unload(b);
    ddph__plugin_unload(a);
}
END_TEST

/* PowerSGD keeps its state in the bucket's memory through the minor-1
 * services (axpy, copy, zero): it must decline a minor-0 host, and take
 * this one.  Also checks DDPH_HAS_MEMBER on a minor-0-sized table. */
START_TEST(powersgd_declines_minor_0_hosts)
{
    char path[512];
    snprintf(path, sizeof path, "%s/powersgd.so",
             unit_env("DDPH_TEST_PLUGIN_DIR"));
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(dl != NULL, "%s", dlerror());
    ddph_plugin_entry_v1 entry;
    void *sym = dlsym(dl, DDPH_PLUGIN_ENTRY_V1);
    ck_assert_ptr_nonnull(sym);
    memcpy(&entry, &sym, sizeof entry);
    ck_assert_ptr_null(entry(0));
    ck_assert_ptr_nonnull(entry(DDPH_PLUGIN_ABI_MINOR));
    dlclose(dl);

    ddph_services s = {.struct_size = (uint32_t)offsetof(ddph_services, device)};
    ck_assert(DDPH_HAS_MEMBER(&s, ddph_services, host));
    ck_assert(!DDPH_HAS_MEMBER(&s, ddph_services, device));
    ck_assert(!DDPH_HAS_MEMBER(&s, ddph_services, zero));
    s.struct_size = sizeof s;
    ck_assert(DDPH_HAS_MEMBER(&s, ddph_services, zero));
}
END_TEST

START_TEST(missing_file_lists_paths_tried)
{
    expect_load_error("nosuchhook", "/nowhere/a:/nowhere/b", DDPH_ERR_PLUGIN,
                      "hook 'nosuchhook' not found; paths tried: "
                      "/nowhere/a/nosuchhook.so (the folder does not exist), "
                      "/nowhere/b/nosuchhook.so (the folder does not exist) "
                      "(`ddphook plugins` lists the hooks;");
    expect_load_error("/nowhere/x.so", NULL, DDPH_ERR_PLUGIN,
                      "hook plugin /nowhere/x.so: No such file or directory");
    expect_load_error("bad name!", "/tmp", DDPH_ERR_PLUGIN,
                      "has characters other than");
    /* A typo of a hook along the path is named; the folder exists. */
    char want[1024];
    snprintf(want, sizeof want,
             "hook 'powersdg' not found (did you mean 'powersgd'?); paths "
             "tried: %s/powersdg.so (`ddphook plugins`",
             unit_env("DDPH_TEST_PLUGIN_DIR"));
    expect_load_error("powersdg", unit_env("DDPH_TEST_PLUGIN_DIR"),
                      DDPH_ERR_PLUGIN, want);
}
END_TEST

/* A hook shipped as source (a folder with a Makefile) that is not built
 * yet: the message says how to build it. */
START_TEST(unbuilt_hook_says_how_to_build_it)
{
    char dir[] = "/tmp/ddph-unit-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[600], want[1400];
    snprintf(path, sizeof path, "%s/Makefile", dir);
    FILE *f = fopen(path, "w");
    fputs("all:\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/myhook.so", dir);
    snprintf(want, sizeof want,
             "hook plugin %s: No such file or directory (not built yet? "
             "run: make -C %s)",
             path, dir);
    expect_load_error(path, NULL, DDPH_ERR_PLUGIN, want);
    snprintf(path, sizeof path, "%s/Makefile", dir);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* ddphook plugins and the suggestions list hooks by name, sorted, each
 * once, whatever order the folders return them in. */
START_TEST(plugin_names_sorted_unique)
{
    char path[1200];
    snprintf(path, sizeof path, "%s:/nowhere:%s", unit_env("DDPH_TEST_PLUGIN_DIR"),
             unit_env("DDPH_TEST_PLUGIN_DIR"));
    char **names;
    size_t n = ddph__plugin_names(path, &names);
    ck_assert_uint_ge(n, 5);
    for (size_t i = 1; i < n; i++)
        ck_assert_msg(strcmp(names[i - 1], names[i]) < 0, "%s before %s",
                      names[i - 1], names[i]);
    ck_assert_str_eq(names[0], "allreduce");
    ddph__names_free(names, n);
    char **files;
    ck_assert_int_eq(ddph__plugin_dir_list("/nowhere", &files), -1);
}
END_TEST

START_TEST(not_a_shared_object)
{
    char dir[] = "/tmp/ddph-unit-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[600];
    snprintf(path, sizeof path, "%s/notso.so", dir);
    FILE *f = fopen(path, "w");
    fputs("this is text, not ELF\n", f);
    fclose(f);
    expect_load_error(path, NULL, DDPH_ERR_PLUGIN,
                      "is not an ELF shared object");
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(abi_errors)
{
    expect_load_error(fake("no_entry"), NULL, DDPH_ERR_PLUGIN,
                      "has no entry symbol ddph_plugin_v1");
    /* Refused from its symbol table: its constructor never ran. */
    ck_assert_ptr_null(getenv("DDPH_FAKE_CONSTRUCTOR_RAN"));
    expect_load_error(fake("v2_only"), NULL, DDPH_ERR_ABI,
                      "exports ddph_plugin_v2 only: ABI major 2 is newer "
                      "than this host; this host supports major 1");
    expect_load_error(fake("v0_only"), NULL, DDPH_ERR_ABI,
                      "exports ddph_plugin_v0 only: ABI major 0 is no longer "
                      "supported; this host supports major 1");
    expect_load_error(fake("major_mismatch"), NULL, DDPH_ERR_ABI,
                      "returned a table of ABI major 7; this host supports "
                      "major 1");
    expect_load_error(fake("small_struct"), NULL, DDPH_ERR_ABI,
                      "struct_size 12 is smaller than");
    /* Not "ABI major 0": the table is too short to hold abi_major. */
    expect_load_error(fake("zero_struct"), NULL, DDPH_ERR_ABI,
                      "struct_size 0 is smaller than");
    /* A name loaded by path is validated too. */
    expect_load_error("bad\nname", "/tmp", DDPH_ERR_PLUGIN,
                      "has characters other than");
    expect_load_error(fake("null_member"), NULL, DDPH_ERR_PLUGIN,
                      "required member 'on_bucket' is NULL");
    expect_load_error(fake("bad_tolerance"), NULL, DDPH_ERR_PLUGIN,
                      "declares tolerance -1: it must be a number from 0");
    expect_load_error(fake("declines"), NULL, DDPH_ERR_ABI,
                      "returned NULL (the plugin declined");
    expect_load_error(fake("bad_schema"), NULL, DDPH_ERR_PLUGIN,
                      "default of option 'rank': 100 is out of range");
}
END_TEST

START_TEST(older_minor_loads_and_reads_nothing_past_its_size)
{
    ddph_plugin *p;
    ddph_err e;
    ck_assert_int_eq(ddph__plugin_load(fake("older_minor"), NULL, 1, &p, &e),
                     DDPH_OK);
    ck_assert_uint_eq(p->plugin_size, DDPH__PLUGIN_V1_MIN_SIZE);
    ck_assert_ptr_nonnull(p->api.on_bucket);
    ck_assert_ptr_null(p->api.on_step_end); /* set past its struct_size */
    ck_assert_ptr_null(p->api.save);
    ddph__plugin_unload(p);
}
END_TEST

/* Minor 1 against this host: a table that ends at stats (flags and
 * on_layout read as nothing), and services that end at minor 1 (a hook
 * that needs minor 2 says so at create, and declines in its entry). */
static void minor1_set_error(const ddph_services *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf((char *)s->host, 256, fmt, ap);
    va_end(ap);
}

START_TEST(minor1_table_and_services)
{
    ddph_plugin *p;
    ddph_err e;
    ck_assert_int_eq(ddph__plugin_load(fake("minor1_table"), NULL, 1, &p, &e),
                     DDPH_OK);
    ck_assert_uint_eq(p->api.abi_minor, 1);
    ck_assert_uint_eq(p->api.flags, 0);
    ck_assert_ptr_null(p->api.on_layout);
    ddph__plugin_unload(p);

    char path[4200], message[256] = "";
    snprintf(path, sizeof path, "%s/topk.so", unit_env("DDPH_TEST_PLUGIN_DIR"));
    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(so != NULL, "%s", dlerror());
    ddph_plugin_entry_v1 entry;
    *(void **)&entry = dlsym(so, DDPH_PLUGIN_ENTRY_V1);
    ck_assert_ptr_nonnull(entry);
    ck_assert_ptr_null(entry(1));
    const ddph_plugin_api_v1 *api = entry(DDPH_PLUGIN_ABI_MINOR);
    ck_assert_ptr_nonnull(api);
    ddph_services s = {
        .struct_size = offsetof(ddph_services, zero) + sizeof(void *),
        .abi_minor = 1,
        .set_error = minor1_set_error,
        .host = message,
    };
    void *state = NULL;
    ck_assert_int_eq(api->create(&s, NULL, &state), DDPH_ERR_UNSUPPORTED);
    ck_assert_ptr_null(state);
    ck_assert_str_eq(message, "topk needs a host with plugin ABI minor 2 "
                              "(this host: 1)");
    dlclose(so);
}
END_TEST

START_TEST(name_must_match)
{
    /* Looked up by name, a file must declare that name. */
    char dir[] = "/tmp/ddph-unit-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/other.so'", fake("with_options"),
             dir);
    ck_assert_int_eq(system(cmd), 0);
    expect_load_error("other", dir, DDPH_ERR_PLUGIN,
                      "declares the name 'fake', not 'other'");
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(world_writable_is_refused)
{
    char dir[] = "/tmp/ddph-unit-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[600], cmd[1400];
    snprintf(path, sizeof path, "%s/fake.so", dir);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", fake("with_options"), path);
    ck_assert_int_eq(system(cmd), 0);
    ddph_plugin *p;
    ddph_err e;
    /* The file writable by others. */
    chmod(dir, 0755);
    chmod(path, 0666);
    ck_assert_int_eq(ddph__plugin_load("fake", dir, 0, &p, &e),
                     DDPH_ERR_INSECURE);
    ck_assert_msg(strstr(e.msg, "the file is writable by other users"), "%s",
                  e.msg);
    ck_assert_msg(strstr(e.msg, "allow_insecure_plugins = true"), "%s", e.msg);
    /* The folder writable by others. */
    chmod(path, 0644);
    chmod(dir, 0777);
    ck_assert_int_eq(ddph__plugin_load("fake", dir, 0, &p, &e),
                     DDPH_ERR_INSECURE);
    ck_assert_msg(strstr(e.msg, "is writable by other users, who could "
                                "replace it"),
                  "%s", e.msg);
    /* Allowed when the job says so. */
    ck_assert_int_eq(ddph__plugin_load("fake", dir, 1, &p, &e), DDPH_OK);
    ddph__plugin_unload(p);
    chmod(dir, 0755);
    ck_assert_int_eq(ddph__plugin_load("fake", dir, 0, &p, &e), DDPH_OK);
    ddph__plugin_unload(p);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Where a plugin lives, judged as ld.so's secure mode, sudo and sshd's
 * StrictModes do: the real path, the file and every folder up to "/". */
START_TEST(plugin_location_matrix)
{
    char dir[] = "/tmp/ddph-unit-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char cmd[2400], path[700];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && mkdir safe open open/sub sticky && "
             "cp '%s' safe/fake.so && cp safe/fake.so open/fake.so && "
             "cp safe/fake.so open/sub/fake.so && cp safe/fake.so sticky/fake.so && "
             "ln -s ../open/fake.so safe/link.so && chmod 0777 open && "
             "chmod 1777 sticky && chmod 0755 open/sub && "
             "cp safe/fake.so safe/group.so && chmod 0664 safe/group.so && "
             "head -c 3000 safe/fake.so > safe/truncated.so",
             dir, fake("with_options"));
    ck_assert_int_eq(system(cmd), 0);
    ddph_plugin *p = NULL;
    ddph_err e;
    static const struct {
        const char *file, *needle;
    } refused[] = {
        {"safe/link.so", "(at "},
        {"open/sub/fake.so", "/open is writable by other users"},
        {"safe/group.so", "the file is writable by its group"},
        {"sticky/fake.so", "sticky, as /tmp, is not enough"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, refused[i].file);
        ck_assert_int_eq(ddph__plugin_load(path, NULL, 0, &p, &e),
                         DDPH_ERR_INSECURE);
        ck_assert_msg(strstr(e.msg, refused[i].needle), "%s: '%s' lacks '%s'",
                      refused[i].file, e.msg, refused[i].needle);
    }
    /* Owned by another user (only root can make such a file here). */
    snprintf(path, sizeof path, "%s/safe/other.so", dir);
    snprintf(cmd, sizeof cmd, "cp '%s/safe/fake.so' '%s'", dir, path);
    ck_assert_int_eq(system(cmd), 0);
    if (geteuid() == 0 && chown(path, 65534, 65534) == 0) {
        ck_assert_int_eq(ddph__plugin_load(path, NULL, 0, &p, &e),
                         DDPH_ERR_INSECURE);
        ck_assert_msg(strstr(e.msg, "owned by uid 65534"), "%s", e.msg);
    }
    /* A truncated file: refused before dlopen could map past its end. */
    snprintf(path, sizeof path, "%s/safe/truncated.so", dir);
    ck_assert_int_eq(ddph__plugin_load(path, NULL, 0, &p, &e),
                     DDPH_ERR_PLUGIN);
    ck_assert_msg(strstr(e.msg, "ELF shared object"), "%s", e.msg);
    /* The safe one loads; its folder /tmp/ddph-unit-X sits in sticky /tmp. */
    snprintf(path, sizeof path, "%s/safe/fake.so", dir);
    ck_assert_int_eq(ddph__plugin_load(path, NULL, 0, &p, &e), DDPH_OK);
    ddph__plugin_unload(p);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* The swap race: another user's folder holds a link that flips, as fast
 * as it can, between a good plugin and their own (whose constructor marks
 * the environment).  Two hundred loads through that link, and through a
 * link in a safe folder that points into theirs, are all refused and the
 * attacker's code never runs.  As root the folder belongs to uid 65534;
 * otherwise it is writable by every user, which is refused the same way. */
START_TEST(swapped_link_never_loads_another_users_plugin)
{
    char dir[] = "/tmp/ddph-unit-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char cmd[2400], link[700], tmp[700], good[700], evil[700], via[700];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && mkdir safe attacker && cp '%s' safe/good.so && "
             "cp '%s' attacker/evil.so && chmod 0777 attacker && "
             "ln -s ../attacker/allreduce.so safe/via.so",
             dir, fake("with_options"), fake("attacker"));
    ck_assert_int_eq(system(cmd), 0);
    snprintf(link, sizeof link, "%s/attacker/allreduce.so", dir);
    snprintf(tmp, sizeof tmp, "%s/attacker/next.so", dir);
    snprintf(good, sizeof good, "%s/safe/good.so", dir);
    snprintf(evil, sizeof evil, "%s/attacker/evil.so", dir);
    snprintf(via, sizeof via, "%s/safe/via.so", dir);
    ck_assert_int_eq(symlink(good, link), 0);
    if (geteuid() == 0) {
        snprintf(cmd, sizeof cmd, "chown -hR 65534:65534 '%s/attacker' && "
                 "chmod 0755 '%s/attacker'", dir, dir);
        ck_assert_int_eq(system(cmd), 0);
    }
    unsetenv("DDPH_FAKE_ATTACKER_RAN");
    pid_t swapper = fork();
    ck_assert_int_ge(swapper, 0);
    if (swapper == 0) {
        for (unsigned i = 0;; i++) {
            unlink(tmp);
            if (symlink(i % 2 ? good : evil, tmp) == 0)
                rename(tmp, link);
        }
    }
    int refused = 0;
    for (int i = 0; i < 200; i++) {
        ddph_plugin *p = NULL;
        ddph_err e;
        const char *path = i % 2 ? via : link;
        ddph_status st = ddph__plugin_load(path, NULL, 0, &p, &e);
        if (st == DDPH_OK)
            ddph__plugin_unload(p);
        refused += st == DDPH_ERR_INSECURE &&
                   strstr(e.msg, "/attacker") != NULL;
    }
    kill(swapper, SIGKILL);
    waitpid(swapper, NULL, 0);
    ck_assert_ptr_null(getenv("DDPH_FAKE_ATTACKER_RAN"));
    ck_assert_int_eq(refused, 200);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Plugins are loaded through /proc/self/fd/N: two loaded at once, one
 * unloaded and another loaded in its place, and the same file twice, each
 * handle is the file asked for. */
START_TEST(loaded_through_descriptors_stay_distinct)
{
    ddph_plugin *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    ddph_err e;
    const char *dir = unit_env("DDPH_TEST_PLUGIN_DIR");
    ck_assert_int_eq(ddph__plugin_load("powersgd", dir, 1, &a, &e), DDPH_OK);
    ck_assert_int_eq(ddph__plugin_load("fp16", dir, 1, &b, &e), DDPH_OK);
    ck_assert_str_eq(a->api.name, "powersgd");
    ck_assert_str_eq(b->api.name, "fp16");
    ddph__plugin_unload(a);
    ck_assert_int_eq(ddph__plugin_load("bf16", dir, 1, &c, &e), DDPH_OK);
    ck_assert_str_eq(c->api.name, "bf16");
    ck_assert_int_eq(ddph__plugin_load("fp16", dir, 1, &d, &e), DDPH_OK);
    ck_assert_str_eq(d->api.name, "fp16");
    ddph__plugin_unload(b);
    ddph__plugin_unload(c);
    ck_assert_int_eq(ddph__plugin_load("allreduce", dir, 1, &a, &e), DDPH_OK);
    ck_assert_str_eq(a->api.name, "allreduce");
    ddph__plugin_unload(a);
    ddph__plugin_unload(d);
}
END_TEST

/* A link in a safe folder belongs to whoever made it, and its owner
 * chooses where it points: one owned by another user is refused. */
START_TEST(link_owned_by_another_user_is_refused)
{
    if (geteuid() != 0)
        return; /* only root can make a link owned by another user */
    char dir[] = "/tmp/ddph-unit-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char cmd[1600], path[700];
    snprintf(cmd, sizeof cmd,
             "cd '%s' && cp '%s' good.so && ln -s good.so link.so && "
             "chown -h 65534:65534 link.so",
             dir, fake("with_options"));
    ck_assert_int_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/link.so", dir);
    ddph_plugin *p = NULL;
    ddph_err e;
    ck_assert_int_eq(ddph__plugin_load(path, NULL, 0, &p, &e),
                     DDPH_ERR_INSECURE);
    ck_assert_msg(strstr(e.msg, "link.so is owned by uid 65534"), "%s", e.msg);
    /* allow_insecure_plugins loads it */
    ck_assert_int_eq(ddph__plugin_load(path, NULL, 1, &p, &e), DDPH_OK);
    ddph__plugin_unload(p);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Options of the with_options fake, from an INI section.  The options
 * point into the plugin's table: it stays loaded until the test is done. */
static ddph_plugin *loaded;

static ddph_status options_from(const char *ini, ddph_options **o,
                                ddph_err *e, char *path, size_t len)
{
    ddph_config cfg;
    unit_write_temp(ini, path, len);
    ck_assert_int_eq(ddph__config_load(path, &cfg, e), DDPH_OK);
    unlink(path);
    ddph_plugin *p;
    ck_assert_int_eq(ddph__plugin_load(fake("with_options"), NULL, 1, &p, e),
                     DDPH_OK);
    ddph_status st = ddph__options_build(p->api.name, p->api.options,
                                         ddph__config_hook_section(&cfg, "fake"),
                                         path, o, e);
    ddph__plugin_unload(loaded);
    loaded = p;
    ddph__config_free(&cfg);
    return st;
}

static void expect_option_error(const char *ini, const char *needle)
{
    ddph_options *o = NULL;
    ddph_err e;
    char path[256], where[300];
    ck_assert_int_eq(options_from(ini, &o, &e, path, sizeof path),
                     DDPH_ERR_OPTION);
    snprintf(where, sizeof where, "%s:3: ", path);
    ck_assert_msg(strstr(e.msg, where), "'%s' lacks '%s'", e.msg, where);
    ck_assert_msg(strstr(e.msg, needle), "'%s' lacks '%s'", e.msg, needle);
}

START_TEST(options_validated_against_schema)
{
    ddph_options *o;
    ddph_err e;
    char path[256];
    ck_assert_int_eq(options_from("[hook.fake]\nrank = 4\nratio = 0.25\n"
                                  "enabled = off\n",
                                  &o, &e, path, sizeof path),
                     DDPH_OK);
    ck_assert_int_eq(ddph__opt_int(o, "rank"), 4);
    ck_assert(ddph__opt_real(o, "ratio") == 0.25);
    ck_assert_int_eq(ddph__opt_bool(o, "enabled"), 0);
    ck_assert_str_eq(ddph__opt_string(o, "label"), "x"); /* default */
    ddph__options_free(o);

    expect_option_error("[hook.fake]\nrank = 1\nrnak = 2\n",
                        "hook 'fake' has no option 'rnak'; did you mean "
                        "'rank'?");
    expect_option_error("[hook.fake]\nrank = 1\nzzzzzzzz = 2\n",
                        "has no option 'zzzzzzzz' (see `ddphook describe");
    expect_option_error("[hook.fake]\nlabel = y\nrank = two\n",
                        "[hook.fake] rank (int): 'two' is not an integer");
    expect_option_error("[hook.fake]\nlabel = y\nrank = 65\n",
                        "[hook.fake] rank (int): 65 is out of range [1, 64]");
    expect_option_error("[hook.fake]\nlabel = y\nratio = 1.5\n",
                        "ratio (real): 1.5 is out of range [0, 1]");
    expect_option_error("[hook.fake]\nlabel = y\nenabled = perhaps\n",
                        "enabled (bool): 'perhaps' is not true or false");
    ddph__plugin_unload(loaded);
    loaded = NULL;
}
END_TEST

/* ddph_layout.buckets as a plugin of an older minor indexes it: at its
 * own, smaller sizeof(ddph_bucket) (here 1.0's, which ended before
 * divided_by), each element's struct_size saying so; bucket_list points
 * at the host's buckets whatever the stride. */
START_TEST(layout_served_at_the_plugins_stride)
{
    enum { N = 5 };
    ddph_tensor_view tv[N];
    ddph_bucket host[N];
    for (int i = 0; i < N; i++) {
        tv[i] = (ddph_tensor_view){"w", 0, (size_t)(100 + i), 0, NULL};
        host[i] = (ddph_bucket){.struct_size = sizeof(ddph_bucket),
                                .index = i, .count = N, .is_last = i == N - 1,
                                .dtype = DDPH_F32, .numel = (size_t)(100 + i),
                                .ntensors = 1, .tensors = &tv[i],
                                .model = "net", .divided_by = 2};
    }
    ddph_layout layout = {.struct_size = sizeof layout, .model = "net",
                          .nbuckets = N, .buckets = host};
    size_t old = ddph__abi_bucket_size(1);
    ck_assert_uint_lt(old, sizeof(ddph_bucket));
    ddph_plugin_layout shown;
    ck_assert_int_eq(ddph__layout_for_plugin(&layout, old, &shown), DDPH_OK);
    ck_assert_ptr_ne(shown.view.buckets, host);
    for (int i = 0; i < N; i++) {
        const ddph_bucket *b = (const ddph_bucket *)(const void *)(
            (const char *)shown.view.buckets + (size_t)i * old);
        ck_assert_uint_eq(b->struct_size, old);
        ck_assert_int_eq(b->index, i);
        ck_assert_int_eq(b->count, N);
        ck_assert_uint_eq(b->numel, (size_t)(100 + i));
        ck_assert_ptr_eq(b->tensors, &tv[i]);
        ck_assert(!DDPH_HAS_MEMBER(b, ddph_bucket, divided_by));
        ck_assert_ptr_eq(shown.view.bucket_list[i], &host[i]);
        ck_assert_ptr_eq(ddph_util_layout_bucket(&shown.view, i), &host[i]);
    }
    ddph__layout_for_plugin_free(&shown);
    /* 1.2-1.4 and this minor: the host's own array, as it is. */
    for (uint32_t minor = 2; minor <= DDPH_PLUGIN_ABI_MINOR; minor++) {
        ck_assert_uint_eq(ddph__abi_bucket_size(minor), sizeof(ddph_bucket));
        ck_assert_int_eq(ddph__layout_for_plugin(
                             &layout, ddph__abi_bucket_size(minor), &shown),
                         DDPH_OK);
        ck_assert_ptr_eq(shown.view.buckets, host);
        ddph__layout_for_plugin_free(&shown);
    }
    /* A layout from a host before 1.5 (no bucket_list): stepped by the
     * elements' struct_size. */
    layout.struct_size = offsetof(ddph_layout, bucket_list);
    ck_assert_ptr_eq(ddph_util_layout_bucket(&layout, 3), &host[3]);
}
END_TEST

Suite *loader_suite(void)
{
    Suite *s = suite_create("loader");
    TCase *tc = tcase_create("Core");
    tcase_add_test(tc, shipped_allreduce_loads_by_name);
    tcase_add_test(tc, same_plugin_twice_then_another);
    tcase_add_test(tc, powersgd_declines_minor_0_hosts);
    tcase_add_test(tc, missing_file_lists_paths_tried);
    tcase_add_test(tc, unbuilt_hook_says_how_to_build_it);
    tcase_add_test(tc, plugin_names_sorted_unique);
    tcase_add_test(tc, not_a_shared_object);
    tcase_add_test(tc, abi_errors);
    tcase_add_test(tc, older_minor_loads_and_reads_nothing_past_its_size);
    tcase_add_test(tc, minor1_table_and_services);
    tcase_add_test(tc, name_must_match);
    tcase_add_test(tc, world_writable_is_refused);
    tcase_add_test(tc, plugin_location_matrix);
    tcase_add_test(tc, swapped_link_never_loads_another_users_plugin);
    tcase_add_test(tc, link_owned_by_another_user_is_refused);
    tcase_add_test(tc, loaded_through_descriptors_stay_distinct);
    tcase_add_test(tc, options_validated_against_schema);
    tcase_add_test(tc, layout_served_at_the_plugins_stride);
    suite_add_tcase(s, tc);
    return s;
}
