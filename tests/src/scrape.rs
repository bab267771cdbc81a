//! One Prometheus scrape, parsed into series, for assertions on what a binary exports.

use std::collections::{BTreeMap, BTreeSet};

/// One scrape: series (name and sorted labels) to value, and the family names it declares.
pub struct Scrape {
    pub series: BTreeMap<(String, BTreeMap<String, String>), f64>,
    pub families: BTreeSet<String>,
}

impl Scrape {
    pub async fn of(url: &str) -> Self {
        let response = reqwest::Client::new().get(url).send().await.expect("metrics answer");
        assert_eq!(response.status(), 200);
        let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
        assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
        Self::parse(&response.text().await.unwrap())
    }

    pub fn parse(text: &str) -> Self {
        let mut series = BTreeMap::new();
        let mut families = BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                families.insert(rest.split(' ').next().unwrap().to_owned());
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let (key, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match key.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (key, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|l| !l.is_empty())
                .map(|l| {
                    let (k, v) = l.split_once('=').unwrap();
                    (k.to_owned(), v.trim_matches('"').to_owned())
                })
                .collect();
            series.insert((name.to_owned(), labels), value.parse().unwrap());
        }
        Self { series, families }
    }

    /// The value of one series (0 when absent: a labelled counter appears on first use).
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let labels = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        self.series.get(&(name.to_owned(), labels)).copied().unwrap_or(0.0)
    }

    /// A series that must be exported even at zero.
    pub fn present(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let labels_map: BTreeMap<String, String> =
            labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        *self.series.get(&(name.to_owned(), labels_map)).unwrap_or_else(|| panic!("{name}{labels:?} is not exported"))
    }

    /// The sum over every series of `name` whose labels include `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.series
            .iter()
            .filter(|((n, l), _)| n == name && labels.iter().all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v)))
            .map(|(_, v)| v)
            .sum()
    }
}
