/*
 * sim_trace — Chrome trace-event export; see sim_trace.h.
 */
#include "sim_trace.h"

#include "sim_profile_fmt.h"

#include <errno.h>
#include <string.h>

static void trace_str(FILE *f, const char *s)
{
    pf_line l;
    l.n = 0;
    pf_jstr(&l, s);
    pf_flush(&l, f);
}

kf_code sim_trace_write(const sim_profile *p, FILE *f, kf_err *err)
{
    const sim_record *r = p->rec;
    const sim_timing *tm = &p->tm;
    char nb[32];
    char **lt = pf_loc_table(p);

    fputs("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"kforge-sim\",\"target\":", f);
    trace_str(f, p->tgt.name);
    fputs("},\"traceEvents\":[\n", f);
    fputs("{\"ph\":\"M\",\"pid\":1,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":", f);
    trace_str(f, "NeuronCore");
    fputs("}}", f);
    for (uint32_t t = 0; t < tm->n_tracks; t++) {
        if (t >= SIM_TRACK_DMA0 && !tm->track_count[t])
            continue;
        fprintf(f, ",\n{\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"name\":\"thread_name\",\"args\":{\"name\":",
                t + 1);
        trace_str(f, sim_timing_track_name(t, nb, sizeof(nb)));
        fprintf(f, "}},\n{\"ph\":\"M\",\"pid\":1,\"tid\":%u,\"name\":\"thread_sort_index\","
                   "\"args\":{\"sort_index\":%u}}", t + 1, t);
    }
    for (size_t i = 0; i < r->n_insns; i++) {
        const sim_insn *in = &r->insns[i];
        const sim_timed *x = &tm->t[i];
        pf_line l;
        uint64_t bytes = 0;
        for (unsigned k = 0; k < in->nsrc; k++)
            bytes += in->src[k].bytes;
        l.n = 0;
        pf_s(&l, ",\n{\"ph\":\"X\",\"pid\":1,\"tid\":");
        pf_u64(&l, x->track + 1u);
        pf_s(&l, ",\"name\":");
        pf_jstr(&l, sim_opcode_name((sim_opcode)in->opcode));
        pf_s(&l, ",\"cat\":");
        pf_jstr(&l, sim_engine_name((sim_engine)in->engine));
        pf_s(&l, ",\"ts\":");
        pf_fixed(&l, x->start_ps, 6);
        pf_s(&l, ",\"dur\":");
        pf_fixed(&l, x->end_ps - x->start_ps, 6);
        pf_s(&l, ",\"args\":{\"index\":");
        pf_u64(&l, i);
        pf_s(&l, ",\"nki_source_location\":");
        pf_jstr(&l, pf_loc(lt, p, in->loc));
        pf_s(&l, ",\"bytes\":");
        pf_u64(&l, bytes);
        pf_s(&l, ",\"flops\":");
        pf_u64(&l, in->flops);
        pf_s(&l, ",\"wait\":");
        pf_jstr(&l, sim_wait_name((sim_wait)x->wait));
        pf_s(&l, ",\"wait_us\":");
        pf_fixed(&l, x->start_ps - x->free_ps, 6);
        pf_s(&l, "}}");
        pf_flush(&l, f);
    }
    fputs("\n]}\n", f);
    pf_loc_table_free(lt, p);
    if (fflush(f) != 0 || ferror(f))
        return kf_err_set(err, KF_IO, "writing the trace failed: %s", strerror(errno));
    return KF_OK;
}

kf_code sim_trace_write_file(const sim_profile *p, const char *path, kf_err *err)
{
    FILE *f = fopen(path, "w");
    kf_code rc;

    if (!f)
        return kf_err_set(err, KF_IO, "cannot write trace '%s': %s", path, strerror(errno));
    rc = sim_trace_write(p, f, err);
    if (fclose(f) != 0 && rc == KF_OK)
        rc = kf_err_set(err, KF_IO, "closing trace '%s' failed: %s", path, strerror(errno));
    return rc;
}
