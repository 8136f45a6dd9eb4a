//! `circuit_breaker`: Traefik's circuitBreaker, which wraps vulcand/oxy's cbreaker. Standby
//! (closed): every request goes through and its outcome feeds rolling statistics; at most
//! once per `check_period` the expression is checked, and when it holds the breaker trips
//! (open): for `fallback_duration` it answers `response_code` itself. Then it recovers: for
//! `recovery_duration` it lets through a share of requests growing linearly from 0 to one
//! half, tripping again if the expression holds, and goes back to standby after it.
//! Statistics are oxy's `RTMetrics`: answers, network errors (502 and 504, as oxy counts
//! them) and answers by status over 10 one-second buckets; latencies in an HDR histogram
//! (microseconds, 2 significant digits) of 6 parts rolled every 10 seconds. One breaker is
//! shared by every worker serving its router. Opening and closing are written to the error log.

use crate::http::error::{ErrorKind, LocalError};
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use weir_config::breaker_expression::{BreakerMetric, Threshold};
use weir_config::CircuitBreaker as Settings;

/// A router's circuit breaker: its settings and its state, behind one lock.
#[derive(Debug)]
pub struct Breaker {
    settings: Settings,
    /// Which router's breaker, for the error log: "router `a`: circuit breaker `cb`".
    label: String,
    /// Whether the state is standby, readable without the lock: the common case lets a
    /// request through without it (as oxy's read lock does).
    standby: AtomicBool,
    machine: Mutex<Machine>,
}

impl Breaker {
    pub fn new(settings: &Settings, label: String) -> Breaker {
        Breaker {
            settings: settings.clone(),
            label,
            standby: AtomicBool::new(true),
            machine: Mutex::new(Machine::new(Instant::now())),
        }
    }

    /// Request phase: `None` lets the request through, else the breaker's own answer (the
    /// status and its text, as Traefik's fallback writes them).
    pub(super) fn on_request(&self) -> Option<LocalError> {
        // Standby lets every request through: no clock read, no lock.
        if self.standby.load(Ordering::Acquire) || self.admits(Instant::now()) {
            return None;
        }
        let status = self.settings.response_code;
        // The config admits only statuses Go names.
        let text = weir_config::status_text(status).unwrap_or_default();
        Some(LocalError::new(status, ErrorKind::PolicyRefused, text))
    }

    /// How an exchange the breaker let through ended: its status, and how long it took.
    pub(super) fn on_outcome(&self, status: u16, latency: Duration) {
        self.record(status, latency, Instant::now());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Machine> {
        // A panic elsewhere leaves counts that are still counts.
        self.machine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a request arriving at `now` goes through (oxy's `activateFallback`, negated).
    fn admits(&self, now: Instant) -> bool {
        if self.standby.load(Ordering::Acquire) {
            return true;
        }
        let (admitted, closed) = self.admits_locked(now);
        if closed {
            crate::log_info!("{} closed: the recovery is over", self.label);
        }
        admitted
    }

    /// `admits`' work under the lock; with whether this request closed the breaker.
    fn admits_locked(&self, now: Instant) -> (bool, bool) {
        let mut machine = self.lock();
        if let State::Tripped { until } = machine.state {
            if now < until {
                return (false, false);
            }
            machine.state = State::Recovering {
                until: now + self.settings.recovery_duration,
                ramp: Ramp::new(now),
            };
        }
        match &mut machine.state {
            State::Standby => (true, false),
            State::Recovering { until, .. } if now > *until => {
                machine.state = State::Standby;
                self.standby.store(true, Ordering::Release);
                (true, true)
            }
            State::Recovering { ramp, .. } => {
                (ramp.admits(now, self.settings.recovery_duration), false)
            }
            State::Tripped { .. } => (false, false),
        }
    }

    /// Counts an outcome, then checks the expression when `check_period` has passed since
    /// the last check (oxy's `serve` and `checkAndSet`).
    fn record(&self, status: u16, latency: Duration, now: Instant) {
        if self.record_locked(status, latency, now) {
            let settings = &self.settings;
            crate::log_warn!(
                "{} opened: `{}` holds; answering {} for {:?}",
                self.label,
                settings.expression_text,
                settings.response_code,
                settings.fallback_duration
            );
        }
    }

    /// `record`'s work under the lock; whether the breaker tripped.
    fn record_locked(&self, status: u16, latency: Duration, now: Instant) -> bool {
        let mut machine = self.lock();
        let machine = &mut *machine;
        machine.metrics.record(status, latency, now);
        if machine.next_check.is_some_and(|at| now <= at) {
            return false;
        }
        machine.next_check = Some(now + self.settings.check_period);
        if matches!(machine.state, State::Tripped { .. }) {
            return false;
        }
        let metrics = &mut machine.metrics;
        let holds = self
            .settings
            .expression
            .holds(&mut |metric| metrics.read(metric, now));
        if holds {
            machine.state = State::Tripped {
                until: now + self.settings.fallback_duration,
            };
            self.standby.store(false, Ordering::Release);
            machine.metrics.reset(now);
        }
        holds
    }
}

#[derive(Debug)]
struct Machine {
    state: State,
    /// The next check is due after this (none before the first).
    next_check: Option<Instant>,
    metrics: Metrics,
}

impl Machine {
    fn new(now: Instant) -> Machine {
        Machine {
            state: State::Standby,
            next_check: None,
            metrics: Metrics::new(now),
        }
    }
}

#[derive(Debug)]
enum State {
    /// Closed: everything goes through.
    Standby,
    /// Open: the breaker answers every request until then.
    Tripped { until: Instant },
    /// Lets a growing share through until then.
    Recovering { until: Instant, ramp: Ramp },
}

/// oxy's `ratioController`: admits a request when the share admitted so far, with it, stays
/// under a target growing linearly from 0 to 0.5 over the recovery.
#[derive(Debug)]
struct Ramp {
    start: Instant,
    allowed: u64,
    denied: u64,
}

impl Ramp {
    fn new(start: Instant) -> Ramp {
        Ramp {
            start,
            allowed: 0,
            denied: 0,
        }
    }

    fn admits(&mut self, now: Instant, duration: Duration) -> bool {
        let target = 0.5 * now.duration_since(self.start).as_secs_f64() / duration.as_secs_f64();
        let share = (self.allowed + 1) as f64 / (self.allowed + 1 + self.denied) as f64;
        if share < target {
            self.allowed += 1;
            true
        } else {
            self.denied += 1;
            false
        }
    }
}

/// oxy's rolling counter: 10 buckets of one second, a bucket emptied when time comes back
/// to it.
#[derive(Debug, Clone, Default)]
struct RollingCounter {
    buckets: [u64; RollingCounter::BUCKETS],
    /// The second (since the breaker's origin) of the last increment.
    last_updated: Option<u64>,
}

impl RollingCounter {
    const BUCKETS: usize = 10;

    fn slot(second: u64) -> usize {
        (second % Self::BUCKETS as u64) as usize
    }

    /// Empties the buckets of the seconds since the last increment.
    fn clean(&mut self, second: u64) {
        let Some(last) = self.last_updated else {
            self.buckets = [0; Self::BUCKETS];
            return;
        };
        for back in 0..Self::BUCKETS as u64 {
            match second.checked_sub(back) {
                Some(past) if past > last => self.buckets[Self::slot(past)] = 0,
                _ => break,
            }
        }
    }

    fn increment(&mut self, second: u64) {
        self.clean(second);
        self.buckets[Self::slot(second)] += 1;
        self.last_updated = Some(second);
    }

    fn count(&mut self, second: u64) -> u64 {
        self.clean(second);
        self.buckets.iter().sum()
    }
}

/// oxy's rolling histogram: 6 histograms, the next one emptied and written to once 10
/// seconds have passed since the last turn; a quantile is read over all of them.
#[derive(Debug)]
struct RollingLatencies {
    parts: Vec<Histogram<u64>>,
    current: usize,
    last_roll: Option<Instant>,
}

impl RollingLatencies {
    const PARTS: usize = 6;
    const ROLL: Duration = Duration::from_secs(10);
    /// oxy's bounds: 1µs to an hour, 2 significant digits.
    const HIGHEST_MICROS: u64 = 3_600_000_000;

    fn empty() -> Histogram<u64> {
        Histogram::new_with_bounds(1, Self::HIGHEST_MICROS, 2)
            .expect("1µs to an hour at 2 significant digits are valid bounds")
    }

    fn new() -> RollingLatencies {
        RollingLatencies {
            parts: (0..Self::PARTS).map(|_| Self::empty()).collect(),
            current: 0,
            last_roll: None,
        }
    }

    fn record(&mut self, latency: Duration, now: Instant) {
        if self
            .last_roll
            .is_none_or(|last| now.duration_since(last) >= Self::ROLL)
        {
            self.current = (self.current + 1) % Self::PARTS;
            self.parts[self.current].reset();
            self.last_roll = Some(now);
        }
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        // Beyond an hour: dropped, as oxy's histogram refuses it.
        let _ = self.parts[self.current].record(micros);
    }

    fn reset(&mut self, now: Instant) {
        self.parts.iter_mut().for_each(Histogram::reset);
        self.current = 0;
        self.last_roll = Some(now);
    }

    /// The latency at `percentile` (0 to 100) over all parts, in whole milliseconds, as Go's
    /// hdrhistogram reads it: the highest value equivalent to the one where the count reaches
    /// `percentile`% of the total, rounded to the nearest count; 0 for an empty histogram.
    fn at_percentile_ms(&self, percentile: f64) -> i64 {
        let mut merged = Self::empty();
        for part in &self.parts {
            // Same bounds: adding cannot fail.
            let _ = merged.add(part);
        }
        let percentile = percentile.min(100.0);
        let wanted = ((percentile / 100.0) * merged.len() as f64 + 0.5) as i64;
        if wanted <= 0 {
            return 0;
        }
        let mut seen = 0;
        for step in merged.iter_recorded() {
            seen += step.count_at_value() as i64;
            if seen >= wanted {
                let micros = merged.highest_equivalent(step.value_iterated_to());
                return (micros / 1000) as i64;
            }
        }
        0
    }
}

/// oxy's `RTMetrics`.
#[derive(Debug)]
struct Metrics {
    /// Counters count seconds from here.
    origin: Instant,
    total: RollingCounter,
    network_errors: RollingCounter,
    by_status: Vec<(u16, RollingCounter)>,
    latencies: RollingLatencies,
}

impl Metrics {
    fn new(origin: Instant) -> Metrics {
        Metrics {
            origin,
            total: RollingCounter::default(),
            network_errors: RollingCounter::default(),
            by_status: Vec::new(),
            latencies: RollingLatencies::new(),
        }
    }

    fn second(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.origin).as_secs()
    }

    fn record(&mut self, status: u16, latency: Duration, now: Instant) {
        let second = self.second(now);
        self.total.increment(second);
        if matches!(status, 502 | 504) {
            self.network_errors.increment(second);
        }
        match self.by_status.iter_mut().find(|(s, _)| *s == status) {
            Some((_, counter)) => counter.increment(second),
            None => {
                let mut counter = RollingCounter::default();
                counter.increment(second);
                self.by_status.push((status, counter));
            }
        }
        self.latencies.record(latency, now);
    }

    fn reset(&mut self, now: Instant) {
        self.total = RollingCounter::default();
        self.network_errors = RollingCounter::default();
        self.by_status.clear();
        self.latencies.reset(now);
    }

    /// A metric's value now, of the type the expression compares it with.
    fn read(&mut self, metric: &BreakerMetric, now: Instant) -> Threshold {
        let second = self.second(now);
        match metric {
            BreakerMetric::NetworkErrorRatio => {
                let total = self.total.count(second);
                let errors = self.network_errors.count(second);
                Threshold::Ratio(if total == 0 {
                    0.0
                } else {
                    errors as f64 / total as f64
                })
            }
            BreakerMetric::ResponseCodeRatio {
                from,
                to,
                divided_from,
                divided_to,
            } => {
                let (mut part, mut whole) = (0, 0);
                for (status, counter) in &mut self.by_status {
                    let status = i64::from(*status);
                    let count = counter.count(second);
                    if (*from..*to).contains(&status) {
                        part += count;
                    }
                    if (*divided_from..*divided_to).contains(&status) {
                        whole += count;
                    }
                }
                Threshold::Ratio(if whole == 0 {
                    0.0
                } else {
                    part as f64 / whole as f64
                })
            }
            BreakerMetric::LatencyAtQuantileMs(percentile) => {
                Threshold::Whole(self.latencies.at_percentile_ms(*percentile))
            }
            BreakerMetric::RequestThreshold => {
                Threshold::Whole(i64::try_from(self.total.count(second)).unwrap_or(i64::MAX))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);
    const MS: Duration = Duration::from_millis(1);

    fn breaker(expression: &str) -> Breaker {
        breaker_with(expression, |_| {})
    }

    fn breaker_with(expression: &str, edit: impl FnOnce(&mut Settings)) -> Breaker {
        let mut settings = Settings {
            expression: weir_config::breaker_expression::parse(expression).expect(expression),
            expression_text: expression.to_string(),
            check_period: Duration::from_millis(100),
            fallback_duration: Duration::from_secs(10),
            recovery_duration: Duration::from_secs(10),
            response_code: 503,
        };
        edit(&mut settings);
        Breaker::new(&settings, "router `r`: circuit breaker `cb`".into())
    }

    fn state(b: &Breaker) -> &'static str {
        match b.lock().state {
            State::Standby => "standby",
            State::Tripped { .. } => "tripped",
            State::Recovering { .. } => "recovering",
        }
    }

    /// oxy's `statsNetErrors(ratio)`: 100 answers, the first `ratio` of them 504s.
    fn net_errors(b: &Breaker, ratio: f64, now: Instant) {
        let mut machine = b.lock();
        for i in 0..100 {
            let status = if (i as f64) < ratio * 100.0 { 504 } else { 200 };
            machine.metrics.record(status, Duration::ZERO, now);
        }
    }

    fn holds(expression: &str, fill: impl FnOnce(&mut Metrics, Instant)) -> bool {
        let b = breaker(expression);
        let now = Instant::now();
        let mut machine = b.lock();
        fill(&mut machine.metrics, now);
        let metrics = &mut machine.metrics;
        b.settings.expression.holds(&mut |m| metrics.read(m, now))
    }

    fn statuses(codes: &[(u16, usize)]) -> impl FnOnce(&mut Metrics, Instant) + '_ {
        move |m, now| {
            for &(status, count) in codes {
                (0..count).for_each(|_| m.record(status, Duration::ZERO, now));
            }
        }
    }

    /// oxy `cbreaker/predicates_test.go`, Test_parseExpression_tripped: each case's
    /// expression over its statistics.
    #[test]
    fn oxy_s_expressions_over_oxy_s_statistics() {
        let net = |ratio: f64| {
            move |m: &mut Metrics, now| {
                for i in 0..100 {
                    let status = if (i as f64) < ratio * 100.0 { 504 } else { 200 };
                    m.record(status, Duration::ZERO, now);
                }
            }
        };
        let slow = |m: &mut Metrics, now| m.record(200, 51 * MS, now);
        assert!(holds("NetworkErrorRatio() > 0.5", net(0.6)));
        assert!(!holds("NetworkErrorRatio() < 0.5", net(0.6)));
        assert!(holds("LatencyAtQuantileMS(50.0) > 50", slow));
        assert!(!holds("LatencyAtQuantileMS(50.0) < 50", slow));
        let codes = "ResponseCodeRatio(500, 600, 0, 600) > 0.5";
        assert!(holds(codes, statuses(&[(200, 5), (500, 6)])));
        assert!(!holds(codes, statuses(&[(200, 5), (500, 4)])));
        // "quantile not defined": latencies of 0.
        assert!(!holds("LatencyAtQuantileMS(40.0) > 50", net(0.6)));
    }

    #[test]
    fn ratios_count_what_oxy_counts() {
        // 502 and 504 are network errors; a 503 is not.
        assert!(holds(
            "NetworkErrorRatio() == 0.5",
            statuses(&[(502, 1), (504, 1), (503, 2), (200, 0)])
        ));
        // `to` is excluded; no answer in the divisor's range reads as 0.
        assert!(holds(
            "ResponseCodeRatio(500, 502, 500, 600) == 0.5",
            statuses(&[(500, 1), (501, 1), (502, 2)])
        ));
        assert!(holds(
            "ResponseCodeRatio(500, 600, 600, 700) == 0.0",
            statuses(&[(500, 3)])
        ));
        assert!(holds("NetworkErrorRatio() == 0.0", |_, _| {}));
        assert!(holds(
            "RequestThreshold() == 7",
            statuses(&[(200, 3), (404, 4)])
        ));
        // The median of 1, 2, ..., 100 ms; 2 significant digits keep a millisecond exact.
        let spread = |m: &mut Metrics, now| {
            (1..=100).for_each(|ms| m.record(200, ms * MS, now));
        };
        assert!(holds("LatencyAtQuantileMS(50.0) == 50", spread));
        assert!(holds("LatencyAtQuantileMS(99.0) == 99", spread));
        assert!(holds("LatencyAtQuantileMS(100.0) == 100", spread));
        assert!(holds("LatencyAtQuantileMS(0.0) == 0", spread));
    }

    /// Counts leave the window 10 seconds on; latencies after 6 turns of 10 seconds.
    #[test]
    fn the_window_rolls_as_oxy_s() {
        let t0 = Instant::now();
        let mut m = Metrics::new(t0);
        m.record(504, 80 * MS, t0);
        m.record(200, 80 * MS, t0 + 5 * SECOND);
        let ratio = |m: &mut Metrics, at| match m.read(&BreakerMetric::NetworkErrorRatio, at) {
            Threshold::Ratio(r) => r,
            other => panic!("{other:?}"),
        };
        let latency = |m: &mut Metrics, at| m.read(&BreakerMetric::LatencyAtQuantileMs(50.0), at);
        assert_eq!(ratio(&mut m, t0 + 9 * SECOND), 0.5);
        assert_eq!(
            ratio(&mut m, t0 + 10 * SECOND),
            0.0,
            "the 504's second is gone"
        );
        assert_eq!(
            m.read(&BreakerMetric::RequestThreshold, t0 + 14 * SECOND),
            Threshold::Whole(1)
        );
        assert_eq!(
            m.read(&BreakerMetric::RequestThreshold, t0 + 15 * SECOND),
            Threshold::Whole(0)
        );
        assert_eq!(latency(&mut m, t0 + 15 * SECOND), Threshold::Whole(80));
        // A turn every 10 seconds, each written to once: the 80ms part is emptied on the
        // sixth.
        let highest = |m: &mut Metrics, at| m.read(&BreakerMetric::LatencyAtQuantileMs(100.0), at);
        for turn in 1..=5 {
            m.record(200, MS, t0 + turn * 10 * SECOND);
        }
        assert_eq!(highest(&mut m, t0 + 51 * SECOND), Threshold::Whole(80));
        m.record(200, MS, t0 + 60 * SECOND);
        assert_eq!(highest(&mut m, t0 + 61 * SECOND), Threshold::Whole(1));
        let mut m = Metrics::new(t0);
        m.record(200, 80 * MS, t0);
        for turn in 1..=4 {
            m.record(200, MS, t0 + turn * 10 * SECOND);
        }
        m.record(200, MS, t0 + 41 * SECOND);
        assert_eq!(
            latency(&mut m, t0 + 41 * SECOND),
            Threshold::Whole(1),
            "5 of 6 at 1ms"
        );
        (0..5).for_each(|_| m.record(200, 80 * MS, t0 + 42 * SECOND));
        assert_eq!(
            latency(&mut m, t0 + 42 * SECOND),
            Threshold::Whole(80),
            "6 of 11 at 80ms"
        );
    }

    /// oxy `cbreaker_test.go`, TestCircuitBreaker_fullCycle: standby, tripped for 10s,
    /// recovering (some requests through), standby again, on a frozen clock.
    #[test]
    fn oxy_s_full_cycle() {
        let b = breaker("NetworkErrorRatio() > 0.5");
        let t0 = Instant::now();
        assert!(b.admits(t0));
        b.record(200, Duration::ZERO, t0);
        assert_eq!(state(&b), "standby");
        net_errors(&b, 0.6, t0);
        let t = t0 + Duration::from_millis(101);
        assert!(b.admits(t));
        b.record(200, Duration::ZERO, t);
        assert_eq!(state(&b), "tripped");
        // Still tripped 9 seconds on.
        let t = t + 9 * SECOND;
        assert!(!b.admits(t));
        assert_eq!(state(&b), "tripped");
        // Recovering a second later; its first request is refused.
        let t = t + SECOND + MS;
        assert!(!b.admits(t));
        assert_eq!(state(&b), "recovering");
        // 5 seconds on, some go through.
        let t = t + 5 * SECOND;
        let allowed = (0..100).filter(|_| b.admits(t)).count();
        assert_ne!(allowed, 0);
        // Standby once the recovery is over.
        let t = t + 5 * SECOND + MS;
        assert!(b.admits(t));
        assert_eq!(state(&b), "standby");
    }

    /// oxy `cbreaker_test.go`, TestCircuitBreaker_triggerDuringRecovery: the expression holds
    /// again while recovering, and the breaker trips again.
    #[test]
    fn oxy_s_trigger_during_recovery() {
        let b = breaker_with("NetworkErrorRatio() > 0.5", |s| {
            s.check_period = Duration::from_micros(1)
        });
        let t0 = Instant::now();
        net_errors(&b, 0.6, t0);
        assert!(b.admits(t0));
        b.record(200, Duration::ZERO, t0);
        assert_eq!(state(&b), "tripped");
        let t = t0 + 10 * SECOND + MS;
        assert!(!b.admits(t));
        assert_eq!(state(&b), "recovering");
        let mut t = t + 5 * SECOND;
        net_errors(&b, 0.6, t);
        let mut allowed = 0;
        for _ in 0..100 {
            if b.admits(t) {
                allowed += 1;
                b.record(200, Duration::ZERO, t);
            }
            t += Duration::from_micros(2);
        }
        assert_ne!(allowed, 0);
        assert_eq!(state(&b), "tripped");
    }

    /// oxy `cbreaker_test.go`, TestCircuitBreaker_requestThreshold: 18 + 1 answers do not
    /// trip `... && RequestThreshold() >= 20`, 19 + 1 do.
    #[test]
    fn oxy_s_request_threshold() {
        let b = breaker("NetworkErrorRatio() > 0.5 && RequestThreshold() >= 20");
        let t0 = Instant::now();
        {
            let mut machine = b.lock();
            (0..18).for_each(|_| machine.metrics.record(504, Duration::ZERO, t0));
        }
        let t = t0 + Duration::from_millis(101);
        assert!(b.admits(t));
        b.record(504, Duration::ZERO, t);
        assert_eq!(state(&b), "standby", "19 answers");
        let t = t + Duration::from_millis(101);
        assert!(b.admits(t));
        b.record(504, Duration::ZERO, t);
        assert_eq!(state(&b), "tripped", "20 answers");
        assert!(!b.admits(t));
        assert_eq!(
            b.on_request().map(|e| (e.status, e.message.to_string())),
            Some((503, "Service Unavailable".into()))
        );
    }

    /// The expression is checked at most once per `check_period`; tripping starts the
    /// statistics anew.
    #[test]
    fn checks_wait_for_the_check_period_and_tripping_resets_the_window() {
        let b = breaker("NetworkErrorRatio() > 0.5");
        let t0 = Instant::now();
        b.record(200, Duration::ZERO, t0);
        b.record(502, Duration::ZERO, t0 + 50 * MS);
        b.record(502, Duration::ZERO, t0 + 100 * MS);
        assert_eq!(state(&b), "standby", "not checked before 100ms passed");
        b.record(502, Duration::ZERO, t0 + 101 * MS);
        assert_eq!(state(&b), "tripped");
        assert_eq!(
            b.lock()
                .metrics
                .read(&BreakerMetric::RequestThreshold, t0 + 101 * MS),
            Threshold::Whole(0)
        );
    }

    /// oxy `cbreaker/ratio_test.go`, Test_ratioController_rampUp: the share let through
    /// follows the target within 0.05 all along, a request a millisecond.
    #[test]
    fn oxy_s_ramp_up() {
        let duration = 10 * SECOND;
        let t0 = Instant::now();
        let mut ramp = Ramp::new(t0);
        let (mut allowed, mut denied) = (0.0, 0.0);
        for ms in 0..10_000u32 {
            let now = t0 + ms * MS;
            if ramp.admits(now, duration) {
                allowed += 1.0;
            } else {
                denied += 1.0;
            }
            let target = 0.5 * f64::from(ms) / 10_000.0;
            let share = allowed / (allowed + denied);
            assert!(
                (share - target).abs() < 0.05,
                "{ms}ms: {share} for {target}"
            );
        }
    }

    #[test]
    fn a_configured_response_code_answers_with_its_text() {
        let b = breaker_with("NetworkErrorRatio() > 0.5", |s| s.response_code = 429);
        let t0 = Instant::now();
        net_errors(&b, 1.0, t0);
        b.record(504, Duration::ZERO, t0);
        let refusal = b.on_request().expect("tripped");
        assert_eq!(refusal.status, 429);
        assert_eq!(refusal.message, "Too Many Requests");
        assert_eq!(refusal.kind, ErrorKind::PolicyRefused);
    }
}
