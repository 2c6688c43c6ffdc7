/* shmnet's sockets library (crates/shmnet-preload, docs/preload.md).
 *
 * Loaded under `shmnet run -- PROGRAM` (LD_PRELOAD), or linked into a program directly:
 *
 *     cc prog.c -I crates/shmnet-preload/include -L target/release -lshmnet_preload \
 *        -Wl,-rpath,$PWD/target/release
 *
 * Either way its socket, bind, connect, read, write, poll, epoll... take the place of the C
 * library's: a program's IPv4 TCP and UDP sockets bound or connected off loopback run on the
 * shmnet server whose control socket SHMNET_SERVER names (else the default one), everything
 * else goes to the kernel unchanged. These two calls let a program ask what it got; one that
 * may run without the library can look them up with dlsym(RTLD_DEFAULT, "shmnet_present").
 */
#ifndef SHMNET_H
#define SHMNET_H

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when a shmnet server carries this program's sockets (the library attaches to it now if
 * no socket call has yet), 0 when none answered (the reason is said once on stderr). */
int shmnet_present(void);

/* 1 when descriptor fd is a socket the shmnet server carries, 0 when it is the kernel's
 * (or not open). */
int shmnet_fd_carried(int fd);

#ifdef __cplusplus
}
#endif

#endif /* SHMNET_H */
