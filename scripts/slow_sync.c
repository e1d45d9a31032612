/* A slow disk for one process tree: LD_PRELOAD this, and every fsync and
 * fdatasync waits SLOW_SYNC_US microseconds (5000 unless set) before it
 * syncs. RocksDB syncs its WAL through them, so a playground started with
 * it behaves as on a disk whose sync takes that much longer (scripts/
 * many_regions.sh builds and uses it). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <unistd.h>

static void slow(void) {
    const char *us = getenv("SLOW_SYNC_US");
    usleep(us ? atoi(us) : 5000);
}

int fsync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    slow();
    return real(fd);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    slow();
    return real(fd);
}
