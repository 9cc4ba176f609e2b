/* Status codes and the thread's last error message. */
#include "internal.h"

#include <stdbool.h>
#include <string.h>

#define MESSAGE_CAP 1024

static _Thread_local char last_message[MESSAGE_CAP];
/* Whether a backend explained itself since tidepool last called into one: only then does its message
 * belong to the error tidepool is about to report. */
static _Thread_local bool backend_explained;

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

const char *tide_last_error(void) { return last_message; }

tide_status tide__fail(tide_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof last_message, fmt, ap);
    va_end(ap);
    return status;
}

void tide_backend_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_message, sizeof last_message, fmt, ap);
    va_end(ap);
    backend_explained = true;
}

void tide__clear_backend_message(void) { backend_explained = false; }

tide_status tide__fail_with_context(tide_status status, const char *fmt, ...)
{
    char detail[MESSAGE_CAP];
    if (backend_explained)
        memcpy(detail, last_message, sizeof detail);
    else
        snprintf(detail, sizeof detail, "%s", tide_status_name(status));
    backend_explained = false;
    char context[MESSAGE_CAP / 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, sizeof context, fmt, ap);
    va_end(ap);
    /* "<context>: <detail>", cut to fit; written by hand because cutting is expected here. */
    size_t n = strlen(context);
    if (n > sizeof last_message - 3)
        n = sizeof last_message - 3;
    memcpy(last_message, context, n);
    memcpy(last_message + n, ": ", 2);
    n += 2;
    size_t d = strlen(detail);
    if (d > sizeof last_message - 1 - n)
        d = sizeof last_message - 1 - n;
    memcpy(last_message + n, detail, d);
    last_message[n + d] = '\0';
    return status;
}

const char *format_bytes(uint64_t bytes, char buf[32])
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (bytes < 1024) {
        snprintf(buf, 32, "%llu B", (unsigned long long)bytes);
        return buf;
    }
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, 32, "%.1f %s", v, units[u]);
    return buf;
}
