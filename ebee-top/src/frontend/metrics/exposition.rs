//! What a scrape returns: an immutable [`Snapshot`] of metric families, taken once per interval,
//! rendered by the official `prometheus-client` encoders in the Prometheus text format (0.0.4)
//! or in OpenMetrics, as the scraper's `Accept` header asks. Each format is rendered at most
//! once per snapshot, on the first scrape that wants it, on the HTTP thread.

use std::sync::{Arc, OnceLock};

use hyper::body::Bytes;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

/// The value of one series.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Counter(f64),
    Gauge(f64),
    /// Classic histogram: per-bucket (not cumulative) counts by upper bound, ascending; the
    /// `+Inf` bucket is implied by `count`.
    Histogram {
        sum: f64,
        count: u64,
        buckets: Vec<(f64, u64)>,
    },
}

/// One series: its labels (beyond the family name) and value.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub labels: Vec<(&'static str, String)>,
    pub value: Value,
}

/// The kind of a family; every series in it has a value of that kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// One metric family. `name` is without the unit and the `_total` suffix: the encoders add
/// them (`ebee_process_cpu` + seconds + counter is `ebee_process_cpu_seconds_total`).
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub unit: Option<Unit>,
    pub kind: Kind,
    pub series: Vec<Series>,
}

impl Family {
    pub fn new(name: &'static str, help: &'static str, unit: Option<Unit>, kind: Kind) -> Self {
        Self {
            name,
            help,
            unit,
            kind,
            series: Vec::new(),
        }
    }

    /// Add a series (its value must be of the family's kind).
    pub fn push(&mut self, labels: Vec<(&'static str, String)>, value: Value) {
        self.series.push(Series { labels, value });
    }

    /// The family's full name as exposed in the Prometheus text format.
    pub fn exposed_name(&self) -> String {
        let mut s = self.name.to_owned();
        if let Some(u) = &self.unit {
            s.push('_');
            s.push_str(u.as_str());
        }
        if self.kind == Kind::Counter {
            s.push_str("_total");
        }
        s
    }
}

/// The exposition formats a scraper can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`, the classic format (the default).
    Prometheus,
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// Content negotiation: OpenMetrics when the `Accept` header names it with a quality at
    /// least that of the text format (Prometheus asks so), else the text format (also for no
    /// header, `*/*` and anything unparsable).
    pub fn negotiate(accept: Option<&str>) -> Format {
        let Some(accept) = accept else {
            return Format::Prometheus;
        };
        let (mut om, mut text) = (0.0f64, 0.0f64);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let mut q = 1.0f64;
            for p in parts {
                if let Some((k, v)) = p.split_once('=') {
                    if k.trim().eq_ignore_ascii_case("q") {
                        q = v.trim().parse().unwrap_or(0.0);
                    }
                }
            }
            if !q.is_finite() {
                continue;
            }
            match media.as_str() {
                "application/openmetrics-text" => om = om.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if om > 0.0 && om >= text {
            Format::OpenMetrics
        } else {
            Format::Prometheus
        }
    }
}

/// Every family of one interval, and its renderings once made.
#[derive(Debug, Default)]
pub struct Snapshot {
    families: Arc<Vec<Family>>,
    prometheus: OnceLock<Bytes>,
    openmetrics: OnceLock<Bytes>,
}

impl Snapshot {
    pub fn new(families: Vec<Family>) -> Self {
        Self {
            families: Arc::new(families),
            ..Default::default()
        }
    }

    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// Number of series (histogram buckets not counted apart).
    pub fn series(&self) -> usize {
        self.families.iter().map(|f| f.series.len()).sum()
    }

    /// The exposition in `format`, rendered on first use.
    pub fn render(&self, format: Format) -> Bytes {
        let cell = match format {
            Format::Prometheus => &self.prometheus,
            Format::OpenMetrics => &self.openmetrics,
        };
        cell.get_or_init(|| Bytes::from(self.encode(format)))
            .clone()
    }

    fn encode(&self, format: Format) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Families(self.families.clone(), format)));
        let mut out = String::new();
        let r = match format {
            Format::Prometheus => {
                prometheus_client::encoding::prometheus_text::encode(&mut out, &registry)
            }
            Format::OpenMetrics => prometheus_client::encoding::text::encode(&mut out, &registry),
        };
        // Writing to a String cannot fail, and our names are valid: an error here is a bug in
        // a family's definition, which the unit tests render; serve what was written.
        if r.is_err() {
            out.push_str("# encoding error\n");
        }
        out
    }
}

/// The families as a prometheus-client collector, for one format.
#[derive(Debug)]
struct Families(Arc<Vec<Family>>, Format);

impl Collector for Families {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        for f in self.0.iter().filter(|f| !f.series.is_empty()) {
            let t = match f.kind {
                Kind::Counter => MetricType::Counter,
                Kind::Gauge => MetricType::Gauge,
                Kind::Histogram => MetricType::Histogram,
            };
            let mut me = encoder.encode_descriptor(f.name, f.help, f.unit.as_ref(), t)?;
            for s in &f.series {
                if s.labels.is_empty() {
                    encode_value(&mut me, &s.value, self.1)?;
                } else {
                    encode_value(&mut me.encode_family(&s.labels)?, &s.value, self.1)?;
                }
            }
        }
        Ok(())
    }
}

fn encode_value(me: &mut MetricEncoder, v: &Value, format: Format) -> Result<(), std::fmt::Error> {
    type NoExemplar = prometheus_client::metrics::exemplar::Exemplar<Vec<(String, String)>, f64>;
    match v {
        Value::Counter(c) => me.encode_counter::<Vec<(String, String)>, f64, f64>(c, None),
        Value::Gauge(g) => me.encode_gauge(g),
        Value::Histogram {
            sum,
            count,
            buckets,
        } => {
            // The OpenMetrics encoder writes only the buckets it is given, and a histogram
            // without its `+Inf` bucket is one `histogram_quantile` cannot use: add it (the
            // Prometheus text encoder adds it from `count` itself).
            let with_inf: Vec<(f64, u64)>;
            let buckets = match format {
                Format::OpenMetrics => {
                    let finite: u64 = buckets.iter().map(|(_, n)| n).sum();
                    with_inf = buckets
                        .iter()
                        .copied()
                        .chain(std::iter::once((
                            f64::INFINITY,
                            count.saturating_sub(finite),
                        )))
                        .collect();
                    &with_inf[..]
                }
                Format::Prometheus => &buckets[..],
            };
            me.encode_histogram::<Vec<(String, String)>>(
                *sum,
                *count,
                buckets,
                None::<&std::collections::HashMap<usize, NoExemplar>>,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Snapshot {
        let mut cpu = Family::new(
            "ebee_process_cpu",
            "On-CPU time.",
            Some(Unit::Seconds),
            Kind::Counter,
        );
        cpu.push(
            vec![("pid", "42".into()), ("comm", "a \"b\"\\c".into())],
            Value::Counter(1.5),
        );
        let mut n = Family::new("ebee_intervals", "Intervals.", None, Kind::Counter);
        n.push(vec![], Value::Counter(3.0));
        let mut h = Family::new(
            "ebee_x_duration",
            "A histogram.",
            Some(Unit::Seconds),
            Kind::Histogram,
        );
        h.push(
            vec![("pid", "1".into())],
            Value::Histogram {
                sum: 0.5,
                count: 3,
                buckets: vec![(0.1, 1), (1.0, 2)],
            },
        );
        let empty = Family::new("ebee_empty", "No series.", None, Kind::Gauge);
        Snapshot::new(vec![cpu, n, h, empty])
    }

    #[test]
    fn both_formats_render_with_units_and_totals() {
        let s = sample();
        let text = String::from_utf8(s.render(Format::Prometheus).to_vec()).unwrap();
        assert!(text.contains("# TYPE ebee_process_cpu_seconds_total counter\n"));
        assert!(
            text.contains(r#"ebee_process_cpu_seconds_total{pid="42",comm="a \"b\"\\c"} 1.5"#),
            "{text}"
        );
        assert!(text.contains("ebee_intervals_total 3"));
        assert!(text.contains(r#"ebee_x_duration_seconds_bucket{pid="1",le="1"} 3"#));
        assert!(text.contains(r#"ebee_x_duration_seconds_bucket{pid="1",le="+Inf"} 3"#));
        assert!(!text.contains("ebee_empty"));
        assert!(!text.contains("# EOF"));
        let om = String::from_utf8(s.render(Format::OpenMetrics).to_vec()).unwrap();
        assert!(
            om.contains("# TYPE ebee_process_cpu_seconds counter\n"),
            "{om}"
        );
        assert!(om.contains("# UNIT ebee_process_cpu_seconds seconds\n"));
        assert!(om.ends_with("# EOF\n"));
        // Both formats end a histogram with its +Inf bucket, once.
        assert_eq!(om.matches(r#"le="+Inf""#).count(), 1, "{om}");
        assert!(
            om.contains(r#"ebee_x_duration_seconds_bucket{le="+Inf",pid="1"} 3"#),
            "{om}"
        );
        assert_eq!(text.matches(r#"le="+Inf""#).count(), 1, "{text}");
        assert_eq!(s.series(), 3);
        assert_eq!(
            s.families()[0].exposed_name(),
            "ebee_process_cpu_seconds_total"
        );
    }

    #[test]
    fn negotiation_follows_the_accept_header() {
        use Format::*;
        // What Prometheus 2.42 sends.
        let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                    version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        for (accept, want) in [
            (None, Prometheus),
            (Some(prom), OpenMetrics),
            (Some("*/*"), Prometheus),
            (Some("text/plain"), Prometheus),
            (
                Some("application/openmetrics-text; version=1.0.0"),
                OpenMetrics,
            ),
            (
                Some("application/openmetrics-text;q=0.3, text/plain"),
                Prometheus,
            ),
            (Some("application/openmetrics-text;q=0"), Prometheus),
            (Some("application/openmetrics-text;q=abc"), Prometheus),
            (Some("garbage;;;===,,"), Prometheus),
            (Some("APPLICATION/OPENMETRICS-TEXT"), OpenMetrics),
        ] {
            assert_eq!(Format::negotiate(accept), want, "{accept:?}");
        }
    }
}
