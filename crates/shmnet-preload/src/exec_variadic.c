/* The variadic members of the exec family, which stable Rust cannot define: each gathers
 * its arguments into an array and calls the library's own exec (src/exec.rs), which hands
 * the program's surviving sockets to the program started and then calls the C library's
 * execve or execvpe. The library exports only what its Rust code defines, so `execl` and
 * its kin are defined there as jumps to these (the arguments untouched). */
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>

int shmnet_preload_exec(const char *path, char *const argv[], char *const envp[], int search);

/* The most arguments gathered; a longer list fails with E2BIG. */
#define MAX_ARGS 4096

static int gather(const char *path, const char *arg, va_list ap, int with_env, int search) {
    const char *argv[MAX_ARGS + 1];
    size_t n = 0;
    argv[n++] = arg;
    while (arg != NULL) {
        if (n == MAX_ARGS) {
            errno = E2BIG;
            return -1;
        }
        arg = va_arg(ap, const char *);
        argv[n++] = arg;
    }
    char *const *envp = NULL;
    if (with_env)
        envp = va_arg(ap, char *const *);
    return shmnet_preload_exec(path, (char *const *)argv, envp, search);
}

int shmnet_execl(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    int r = gather(path, arg, ap, 0, 0);
    va_end(ap);
    return r;
}

int shmnet_execlp(const char *file, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    int r = gather(file, arg, ap, 0, 1);
    va_end(ap);
    return r;
}

int shmnet_execle(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    int r = gather(path, arg, ap, 1, 0);
    va_end(ap);
    return r;
}
