/* Status codes and the thread's last error message. */
#include "internal.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define MESSAGE_CAP 1024

/* The thread's message, in host memory of its own reached through one thread-local pointer. The
 * library's thread-locals are kept to a few words because all of them sit in the static TLS that glibc
 * reserves for libraries loaded with dlopen (TIDE_TLS_INITIAL_EXEC in CMakeLists.txt), which is small
 * and shared by every such library. Made at a thread's first failure, freed when the thread exits. */
struct thread_message {
    char text[MESSAGE_CAP];
    /* Whether a backend explained itself since tidepool last called into one: only then does its
     * message belong to the error tidepool is about to report. */
    bool backend_explained;
};
static _Thread_local struct thread_message *message;
static pthread_key_t message_key;
static pthread_once_t message_key_once = PTHREAD_ONCE_INIT;
static bool message_key_made;
/* The message of a thread that could not get memory for its own (the status still says what failed);
 * never written. */
static struct thread_message no_room = {"(tidepool had no host memory left for this thread's error message)",
                                        false};

static void message_free(void *m)
{
    free(m);
    message = NULL; /* a destructor that runs later on this thread may fail again: it makes a new one */
}

static void make_message_key(void) { message_key_made = pthread_key_create(&message_key, message_free) == 0; }

/* Unloaded with dlclose: the key's destructor would be gone before threads that made a message exit. */
__attribute__((destructor)) static void delete_message_key(void)
{
    if (message_key_made)
        pthread_key_delete(message_key);
}

/* The thread's message to write, or NULL without host memory for one. */
static struct thread_message *thread_message(void)
{
    if (!message || message == &no_room) {
        pthread_once(&message_key_once, make_message_key);
        struct thread_message *m = calloc(1, sizeof *m);
        if (!m) {
            message = &no_room;
            return NULL;
        }
        if (message_key_made)
            pthread_setspecific(message_key, m);
        message = m;
    }
    return message;
}

const char *tide_status_name(tide_status status)
{
    switch (status) {
    case TIDE_OK: return "TIDE_OK";
    case TIDE_EINVAL: return "TIDE_EINVAL";
    case TIDE_ENOMEM: return "TIDE_ENOMEM";
    case TIDE_EBUSY: return "TIDE_EBUSY";
    case TIDE_EDEVICE: return "TIDE_EDEVICE";
    case TIDE_ECORRUPT: return "TIDE_ECORRUPT";
    case TIDE_ENOTREADY: return "TIDE_ENOTREADY";
    case TIDE_EUNSUPPORTED: return "TIDE_EUNSUPPORTED";
    case TIDE_EHOSTMEM: return "TIDE_EHOSTMEM";
    }
    return "TIDE_E(unknown status)";
}

const char *tide_last_error(void) { return message ? message->text : ""; }

tide_status tide__fail(tide_status status, const char *fmt, ...)
{
    struct thread_message *m = thread_message();
    if (!m)
        return status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->text, sizeof m->text, fmt, ap);
    va_end(ap);
    return status;
}

void tide__assert_failed(const char *condition, const char *file, int line, const char *function)
{
    fprintf(stderr, "tidepool: assertion failed: %s (%s:%d, %s)\n", condition, file, line, function);
    abort();
}

void tide__restore_message(const char *saved)
{
    struct thread_message *m = thread_message();
    if (m)
        snprintf(m->text, sizeof m->text, "%s", saved);
}

void tide_backend_error(const char *fmt, ...)
{
    struct thread_message *m = thread_message();
    if (!m)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->text, sizeof m->text, fmt, ap);
    va_end(ap);
    m->backend_explained = true;
}

void tide__clear_backend_message(void)
{
    if (message && message != &no_room)
        message->backend_explained = false;
}

tide_status tide__fail_with_context(tide_status status, const char *fmt, ...)
{
    struct thread_message *m = thread_message();
    if (!m)
        return status;
    char *last_message = m->text;
    char detail[MESSAGE_CAP];
    if (m->backend_explained)
        memcpy(detail, last_message, sizeof detail);
    else
        snprintf(detail, sizeof detail, "%s", tide_status_name(status));
    m->backend_explained = false;
    char context[MESSAGE_CAP / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
    /* "<context>: <detail>", cut to fit; written by hand because cutting is expected here. */
    size_t n = strlen(context);
    if (n > MESSAGE_CAP - 3)
        n = MESSAGE_CAP - 3;
    memcpy(last_message, context, n);
    memcpy(last_message + n, ": ", 2);
    n += 2;
    size_t d = strlen(detail);
    if (d > MESSAGE_CAP - 1 - n)
        d = MESSAGE_CAP - 1 - n;
    memcpy(last_message + n, detail, d);
    last_message[n + d] = '\0';
    return status;
}

