/* hosts/pacing.py in C, operation for operation (same doubles, same order), and the clock. */
#include "internal.h"

#include <math.h>
#include <time.h>

double eng_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);       /* time.monotonic()'s clock */
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double rto_bounded(const eng_rto *r, double rto)
{
    return fmin(r->max_rto, fmax(r->min_rto, rto));
}

void rto_init(eng_rto *r, double initial, double min_rto, double max_rto)
{
    *r = (eng_rto){.initial = initial, .min_rto = min_rto, .max_rto = max_rto, .min_variance = 0.5};
    r->rto = rto_bounded(r, initial);
}

void rto_sample(eng_rto *r, double rtt)
{
    rtt = fmax(rtt, 0.0);
    if (!r->has_srtt) {
        r->srtt = rtt;
        r->rttvar = rtt / 2;
        r->has_srtt = 1;
    } else {
        r->rttvar = 0.75 * r->rttvar + 0.25 * fabs(r->srtt - rtt);
        r->srtt = 0.875 * r->srtt + 0.125 * rtt;
    }
    r->samples++;
    r->rto = rto_bounded(r, r->srtt + fmax(4 * r->rttvar, r->min_variance * r->srtt));
}

double rto_backoff(eng_rto *r, double used)
{
    r->rto = rto_bounded(r, fmax(r->rto, 2 * used));
    return r->rto;
}

void cwnd_init(eng_cwnd *c, int64_t limit, double minimum)
{
    *c = (eng_cwnd){.limit = limit, .decrease = 0.5, .minimum = minimum, .cwnd = (double)limit,
                    .ssthresh = (double)limit};
}

int64_t cwnd_allowed(const eng_cwnd *c)
{
    return c->cwnd >= 1 ? (int64_t)c->cwnd : 1;
}

void cwnd_on_ack(eng_cwnd *c, int64_t seq)
{
    if (c->has_recover) {
        if (seq < c->recover)
            return;
        c->has_recover = 0;
    }
    if (c->cwnd < c->ssthresh)
        c->cwnd = fmin((double)c->limit, c->cwnd + 1);
    else
        c->cwnd = fmin((double)c->limit, c->cwnd + 1 / c->cwnd);
}

static void cwnd_cut(eng_cwnd *c)
{
    c->losses++;
    c->ssthresh = fmax(c->minimum, c->cwnd * c->decrease);
    c->cwnd = c->ssthresh;
}

void cwnd_on_loss(eng_cwnd *c, int64_t highest_sent)
{
    if (c->has_recover)
        return;
    cwnd_cut(c);
    c->has_recover = 1;
    c->recover = highest_sent;
}

void cwnd_on_timeout(eng_cwnd *c, int64_t highest_sent)
{
    cwnd_cut(c);
    c->has_recover = 1;
    c->recover = highest_sent;
}
