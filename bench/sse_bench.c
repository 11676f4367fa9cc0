/*
 * sse_bench — live progress under load (issue 15): STREAMS concurrent
 * GET /v1/jobs/{id}/stream clients on one kforge-api, EVENTS iteration
 * events written through kf_db_apply (as the API's own iteration route
 * does), and for each event and client the time from just before the
 * write to its arrival at the client.  Prints p50/p99/max delivery
 * latency, events lost, and the API's resident memory per stream
 * (VmRSS of KFB_API_PID before and after the streams open).
 *
 *   sse_bench STREAMS EVENTS        (bench/run.sh sse; not part of make test)
 *
 * Reads KFB_PG_DSN, KFB_API_PORT, KFB_TOKEN (a user token), KFB_API_PID,
 * and KFB_SSE_INTERVAL_MS (the time between two events, default 100).
 * One thread: the clients are non-blocking sockets under epoll.
 * Failure behaviour: any setup failure exits 1 with a message.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kf_buf.h"
#include "kf_db.h"

typedef struct client {
    int    fd;
    kf_buf in;
    bool   ready;
    int    got;
} client;

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *msg)
{
    fprintf(stderr, "sse_bench: %s\n", msg);
    exit(1);
}

static int connect_api(int port)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0)
        die("cannot connect to the API (KFB_API_PORT)");
    return fd;
}

/* POST a diag job; its id into id[37]. */
static void submit(int port, const char *token, char id[37])
{
    static const char body[] = "{\"kind\":\"diag\",\"target\":\"trn2\"}";
    char req[1024], buf[8192];
    kf_buf in = KF_BUF_INIT;
    int fd = connect_api(port), n;
    const char *p;
    ssize_t r;

    n = snprintf(req, sizeof(req),
                 "POST /v1/jobs HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\n"
                 "Content-Length: %zu\r\n\r\n%s",
                 token, sizeof(body) - 1, body);
    if (write(fd, req, (size_t)n) != n)
        die("write");
    while ((r = read(fd, buf, sizeof(buf))) > 0)
        kf_buf_add(&in, buf, (size_t)r);
    close(fd);
    p = strstr(in.data, "\"id\"");
    p = p ? strchr(p + 4, '"') : NULL;
    if (!p || strlen(p) < 38)
        die("the job was not created (check KFB_TOKEN)");
    memcpy(id, p + 1, 36);
    id[36] = '\0';
    kf_buf_release(&in);
}

static long rss_kb(const char *pid)
{
    char path[64], line[256];
    FILE *f;
    long kb = -1;

    snprintf(path, sizeof(path), "/proc/%s/status", pid);
    f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static int cmp_ll(const void *a, const void *b)
{
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* Read what came; record the latency of each complete iteration event. */
static void pump(int ep, long long *lat, long *nlat, long cap, int wait_ms)
{
    struct epoll_event evs[256];
    int n = epoll_wait(ep, evs, 256, wait_ms);

    for (int i = 0; i < n; i++) {
        client *c = evs[i].data.ptr;
        char buf[16384];
        ssize_t r;
        char *p, *end;

        while ((r = read(c->fd, buf, sizeof(buf))) > 0)
            kf_buf_add(&c->in, buf, (size_t)r);
        if (!c->ready && strstr(c->in.data, "retry: "))
            c->ready = true;
        p = c->in.data;
        while ((end = strstr(p, "\n\n")) != NULL) {
            char *s = strstr(p, "\"sent_ns\": ");
            if (s && s < end) {
                long long sent = strtoll(s + 11, NULL, 10);
                if (*nlat < cap)
                    lat[(*nlat)++] = now_ns() - sent;
                c->got++;
            }
            p = end + 2;
        }
        if (p != c->in.data) {
            size_t left = c->in.len - (size_t)(p - c->in.data);
            memmove(c->in.data, p, left);
            c->in.len = left;
            c->in.data[left] = '\0';
        }
    }
}

int main(int argc, char **argv)
{
    const char *dsn = getenv("KFB_PG_DSN"), *port_s = getenv("KFB_API_PORT"), *token = getenv("KFB_TOKEN");
    const char *pid = getenv("KFB_API_PID"), *iv = getenv("KFB_SSE_INTERVAL_MS");
    long long interval_ns = (iv && atoi(iv) > 0 ? atoi(iv) : 100) * 1000000LL;
    int streams, events, port, ep, ready = 0, lost = 0;
    char id[37], req[512];
    PGconn *pg;
    PGresult *res;
    long long last, *lat, t0;
    long nlat = 0, rss0, rss1;
    client *cl;

    if (argc != 3 || !dsn || !port_s || !token || !pid)
        die("usage: KFB_PG_DSN= KFB_API_PORT= KFB_TOKEN= KFB_API_PID= sse_bench STREAMS EVENTS");
    streams = atoi(argv[1]);
    events = atoi(argv[2]);
    port = atoi(port_s);
    if (streams < 1 || events < 1)
        die("STREAMS and EVENTS must be positive");
    pg = PQconnectdb(dsn);
    if (PQstatus(pg) != CONNECTION_OK)
        die("cannot connect to PostgreSQL (KFB_PG_DSN)");
    submit(port, token, id);
    {
        const char *p[1] = { id };
        res = PQexecParams(pg, "SELECT coalesce(max(id), 0) FROM job_events WHERE job_id = $1::uuid", 1, NULL, p,
                           NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_TUPLES_OK)
            die("cannot read the job's events");
        last = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        PQclear(res);
    }
    rss0 = rss_kb(pid);

    ep = epoll_create1(0);
    cl = calloc((size_t)streams, sizeof(*cl));
    lat = calloc((size_t)streams * (size_t)events, sizeof(*lat));
    if (!cl || !lat)
        die("out of memory");
    for (int i = 0; i < streams; i++) {
        struct epoll_event ev = { .events = EPOLLIN };
        int n = snprintf(req, sizeof(req),
                         "GET /v1/jobs/%s/stream HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                         "Accept: text/event-stream\r\nLast-Event-ID: %lld\r\n\r\n",
                         id, token, last);
        cl[i].fd = connect_api(port);
        kf_buf_init(&cl[i].in);
        if (write(cl[i].fd, req, (size_t)n) != n)
            die("write");
        ev.data.ptr = &cl[i];
        fcntl(cl[i].fd, F_SETFL, fcntl(cl[i].fd, F_GETFL) | O_NONBLOCK);
        epoll_ctl(ep, EPOLL_CTL_ADD, cl[i].fd, &ev);
    }
    t0 = now_ns();
    while (ready < streams && now_ns() - t0 < 30000000000LL) {
        pump(ep, lat, &nlat, 0, 100);
        ready = 0;
        for (int i = 0; i < streams; i++)
            ready += cl[i].ready;
    }
    if (ready < streams) {
        fprintf(stderr, "sse_bench: only %d of %d streams opened (KFORGE_MAX_STREAMS, KFORGE_API_CONNS_PER_IP, "
                        "ulimit -n?)\n", ready, streams);
        free(cl);
        free(lat);
        return 1;
    }
    rss1 = rss_kb(pid);

    for (int e = 0; e < events; e++) {
        char detail[128];
        kf_db_move mv = { .move = KF_MOVE_ITERATION, .job_id = id, .attempt = 0, .detail = detail };
        kf_err err = KF_ERR_INIT;
        long long until;

        snprintf(detail, sizeof(detail), "{\"seq\": %d, \"params\": {\"sent_ns\": %lld}}", e, now_ns());
        if (kf_db_apply(pg, NULL, &mv, NULL, &err) != KF_OK) {
            fprintf(stderr, "sse_bench: %s\n", err.msg);
            free(cl);
            free(lat);
            return 1;
        }
        until = now_ns() + interval_ns;
        while (now_ns() < until)
            pump(ep, lat, &nlat, (long)streams * events, 5);
    }
    t0 = now_ns();
    while (nlat < (long)streams * events && now_ns() - t0 < 5000000000LL)
        pump(ep, lat, &nlat, (long)streams * events, 50);
    for (int i = 0; i < streams; i++)
        lost += events - cl[i].got;
    qsort(lat, (size_t)nlat, sizeof(*lat), cmp_ll);
    printf("streams %d, events %d every %lld ms, deliveries %ld, lost %d\n", streams, events, interval_ns / 1000000,
           nlat, lost);
    if (nlat > 0) {
        long i50 = nlat / 2, i99 = nlat * 99 / 100;
        printf("delivery latency p50 %.2f ms, p99 %.2f ms, max %.2f ms (target p99 <= 50 ms)\n",
               (double)lat[i50] / 1e6, (double)lat[i99] / 1e6, (double)lat[nlat - 1] / 1e6);
    }
    printf("api rss %ld kB before, %ld kB with the streams open: %.1f kB per stream\n", rss0, rss1,
           (double)(rss1 - rss0) / streams);
    for (int i = 0; i < streams; i++) {
        close(cl[i].fd);
        kf_buf_release(&cl[i].in);
    }
    free(cl);
    free(lat);
    PQfinish(pg);
    return lost ? 1 : 0;
}
