//! Network coordinates as Serf computes them (Vivaldi with a height term,
//! an adjustment window, a latency filter and gravity; the same constants),
//! and their wire shape (`Coord`: `Vec`, `Error`, `Adjustment`, `Height`,
//! all in seconds). A [`VivaldiClient`] moves its own coordinate with every
//! observed round trip to another node; [`Coordinate::distance_to`]
//! estimates the round trip between any two.

use std::collections::HashMap;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// Two positions closer than this are on top of each other.
const ZERO_THRESHOLD: f64 = 1.0e-6;

/// The longest round trip an update accepts (Serf's).
pub const MAX_RTT: Duration = Duration::from_secs(10);

/// The algorithm's tuning (Serf's `coordinate.DefaultConfig`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CoordinateConfig {
    /// Euclidean dimensions (8).
    pub dimensionality: usize,
    /// The error of a node that has observed nothing, and its upper bound (1.5).
    pub vivaldi_error_max: f64,
    /// How much one observation may change the confidence (0.25).
    pub vivaldi_ce: f64,
    /// How much one observation may move the coordinate (0.25).
    pub vivaldi_cc: f64,
    /// Observations averaged into the adjustment term (20; 0 disables it).
    pub adjustment_window_size: usize,
    /// The smallest height (10 µs).
    pub height_min: f64,
    /// Round trips per node the moving median is taken over (3).
    pub latency_filter_size: usize,
    /// How strongly gravity pulls coordinates back to the origin (150).
    pub gravity_rho: f64,
}

impl Default for CoordinateConfig {
    fn default() -> CoordinateConfig {
        CoordinateConfig {
            dimensionality: 8,
            vivaldi_error_max: 1.5,
            vivaldi_ce: 0.25,
            vivaldi_cc: 0.25,
            adjustment_window_size: 20,
            height_min: 10.0e-6,
            latency_filter_size: 3,
            gravity_rho: 150.0,
        }
    }
}

/// A network coordinate (units: seconds), as Consul's API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Coordinate {
    /// The Euclidean part.
    #[serde(rename = "Vec")]
    pub vec: Vec<f64>,
    /// Confidence (dimensionless; lower is better).
    #[serde(rename = "Error")]
    pub error: f64,
    /// A distance offset learned from observations.
    #[serde(rename = "Adjustment")]
    pub adjustment: f64,
    /// A distance offset for the node's access link.
    #[serde(rename = "Height")]
    pub height: f64,
}

impl Coordinate {
    /// A coordinate at the origin with the largest error.
    pub fn new(config: &CoordinateConfig) -> Coordinate {
        Coordinate {
            vec: vec![0.0; config.dimensionality],
            error: config.vivaldi_error_max,
            adjustment: 0.0,
            height: config.height_min,
        }
    }

    /// Every component is a finite number.
    pub fn is_valid(&self) -> bool {
        self.vec.iter().all(|v| v.is_finite())
            && self.error.is_finite()
            && self.adjustment.is_finite()
            && self.height.is_finite()
    }

    /// Both have the same number of dimensions.
    pub fn is_compatible_with(&self, other: &Coordinate) -> bool {
        self.vec.len() == other.vec.len()
    }

    /// The estimated round trip to `other` (adjustments included, unless
    /// they would make it negative). Incompatible coordinates are
    /// infinitely far apart.
    pub fn distance_to(&self, other: &Coordinate) -> Duration {
        if !self.is_compatible_with(other) {
            return Duration::MAX;
        }
        let raw = self.raw_distance_to(other);
        let adjusted = raw + self.adjustment + other.adjustment;
        let seconds = if adjusted > 0.0 { adjusted } else { raw };
        Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX)
    }

    /// The distance in seconds without the adjustment terms.
    fn raw_distance_to(&self, other: &Coordinate) -> f64 {
        magnitude(&diff(&self.vec, &other.vec)) + self.height + other.height
    }

    /// This coordinate pushed by `force` away from `other` (toward it
    /// when negative).
    fn apply_force(
        &self,
        config: &CoordinateConfig,
        force: f64,
        other: &Coordinate,
        rng: &mut impl Rng,
    ) -> Coordinate {
        let (unit, mag) = unit_vector_at(&self.vec, &other.vec, rng);
        let mut moved = self.clone();
        for (v, u) in moved.vec.iter_mut().zip(&unit) {
            *v += u * force;
        }
        if mag > ZERO_THRESHOLD {
            moved.height =
                ((moved.height + other.height) * force / mag + moved.height).max(config.height_min);
        }
        moved
    }
}

fn diff(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}

fn magnitude(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

/// The unit vector from `to` toward `from` and the distance between them;
/// a random direction when they coincide.
fn unit_vector_at(from: &[f64], to: &[f64], rng: &mut impl Rng) -> (Vec<f64>, f64) {
    let mut d = diff(from, to);
    let mag = magnitude(&d);
    if mag > ZERO_THRESHOLD {
        return (d.iter().map(|x| x / mag).collect(), mag);
    }
    for x in d.iter_mut() {
        *x = rng.random::<f64>() - 0.5;
    }
    let mag = magnitude(&d);
    if mag > ZERO_THRESHOLD {
        return (d.iter().map(|x| x / mag).collect(), 0.0);
    }
    let mut axis = vec![0.0; from.len()];
    if let Some(first) = axis.first_mut() {
        *first = 1.0;
    }
    (axis, 0.0)
}

/// A node's coordinate as the catalog keeps it (`/v1/coordinate/nodes`
/// rows and the body of `PUT /v1/coordinate/update`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CoordinateEntry {
    /// The node.
    #[serde(rename = "Node")]
    pub node: String,
    /// The network segment (always empty: Legate has no segments).
    #[serde(rename = "Segment", default)]
    pub segment: String,
    /// Its coordinate.
    #[serde(rename = "Coord")]
    pub coord: Coordinate,
}

/// One datacenter's servers and their WAN coordinates
/// (`/v1/coordinate/datacenters`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatacenterCoordinates {
    /// The datacenter.
    #[serde(rename = "Datacenter")]
    pub datacenter: String,
    /// The network area (`wan`: Legate has only the WAN pool).
    #[serde(rename = "AreaID")]
    pub area_id: String,
    /// Its servers (named `<node>.<dc>`) with a known coordinate.
    #[serde(rename = "Coordinates")]
    pub coordinates: Vec<CoordinateEntry>,
}

/// Why an observation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoordinateError {
    /// The other coordinate has another number of dimensions.
    #[error("dimensions aren't compatible")]
    Incompatible,
    /// A component is NaN or infinite.
    #[error("coordinate is invalid")]
    Invalid,
    /// The round trip is negative or longer than 10 s.
    #[error(
        "round trip time not in valid range, duration {0:?} is not a positive value less than 10s"
    )]
    BadRtt(Duration),
}

/// One node's estimate of its own coordinate, moved by observations.
#[derive(Debug, Clone)]
pub struct VivaldiClient {
    coord: Coordinate,
    origin: Coordinate,
    config: CoordinateConfig,
    adjustment_index: usize,
    adjustment_samples: Vec<f64>,
    latency_samples: HashMap<String, Vec<f64>>,
    resets: u64,
    rng: StdRng,
}

impl VivaldiClient {
    /// A client at the origin (random directions from the OS's entropy).
    pub fn new(config: CoordinateConfig) -> VivaldiClient {
        VivaldiClient::seeded(config, rand::random())
    }

    /// A client whose random directions come from `seed` (repeatable).
    pub fn seeded(config: CoordinateConfig, seed: u64) -> VivaldiClient {
        VivaldiClient {
            coord: Coordinate::new(&config),
            origin: Coordinate::new(&config),
            adjustment_index: 0,
            adjustment_samples: vec![0.0; config.adjustment_window_size],
            latency_samples: HashMap::new(),
            resets: 0,
            rng: StdRng::seed_from_u64(seed),
            config,
        }
    }

    /// The current estimate.
    pub fn coordinate(&self) -> &Coordinate {
        &self.coord
    }

    /// Forces the estimate (a test, or a restart that kept it).
    pub fn set_coordinate(&mut self, coord: Coordinate) -> Result<(), CoordinateError> {
        self.check(&coord)?;
        self.coord = coord;
        Ok(())
    }

    /// Forgets the round trips seen to `node` (it left).
    pub fn forget(&mut self, node: &str) {
        self.latency_samples.remove(node);
    }

    /// How often the estimate became invalid and started over.
    pub fn resets(&self) -> u64 {
        self.resets
    }

    /// The estimated round trip to `other`.
    pub fn distance_to(&self, other: &Coordinate) -> Duration {
        self.coord.distance_to(other)
    }

    fn check(&self, other: &Coordinate) -> Result<(), CoordinateError> {
        if !self.coord.is_compatible_with(other) {
            return Err(CoordinateError::Incompatible);
        }
        if !other.is_valid() {
            return Err(CoordinateError::Invalid);
        }
        Ok(())
    }

    /// Learns from one round trip `rtt` to `node`, whose coordinate is
    /// `other`; the new estimate.
    pub fn update(
        &mut self,
        node: &str,
        other: &Coordinate,
        rtt: Duration,
    ) -> Result<&Coordinate, CoordinateError> {
        self.check(other)?;
        if rtt > MAX_RTT {
            return Err(CoordinateError::BadRtt(rtt));
        }
        let rtt = self.latency_filter(node, rtt.as_secs_f64());
        self.update_vivaldi(other, rtt);
        self.update_adjustment(other, rtt);
        self.update_gravity();
        if !self.coord.is_valid() {
            self.resets += 1;
            self.coord = Coordinate::new(&self.config);
        }
        Ok(&self.coord)
    }

    /// The median of the last few round trips to `node`.
    fn latency_filter(&mut self, node: &str, rtt: f64) -> f64 {
        let samples = self.latency_samples.entry(node.to_string()).or_default();
        samples.push(rtt);
        if samples.len() > self.config.latency_filter_size.max(1) {
            samples.remove(0);
        }
        let mut sorted = samples.clone();
        sorted.sort_by(f64::total_cmp);
        sorted[sorted.len() / 2]
    }

    fn update_vivaldi(&mut self, other: &Coordinate, rtt: f64) {
        let rtt = rtt.max(ZERO_THRESHOLD);
        let dist = self.coord.distance_to(other).as_secs_f64();
        let wrongness = (dist - rtt).abs() / rtt;
        let total_error = (self.coord.error + other.error).max(ZERO_THRESHOLD);
        let weight = self.coord.error / total_error;
        let ce = self.config.vivaldi_ce;
        self.coord.error = (ce * weight * wrongness + self.coord.error * (1.0 - ce * weight))
            .min(self.config.vivaldi_error_max);
        let force = self.config.vivaldi_cc * weight * (rtt - dist);
        self.coord = self
            .coord
            .apply_force(&self.config, force, other, &mut self.rng);
    }

    fn update_adjustment(&mut self, other: &Coordinate, rtt: f64) {
        let window = self.config.adjustment_window_size;
        if window == 0 {
            return;
        }
        self.adjustment_samples[self.adjustment_index] = rtt - self.coord.raw_distance_to(other);
        self.adjustment_index = (self.adjustment_index + 1) % window;
        self.coord.adjustment = self.adjustment_samples.iter().sum::<f64>() / (2.0 * window as f64);
    }

    fn update_gravity(&mut self) {
        let dist = self.origin.distance_to(&self.coord).as_secs_f64();
        let force = -(dist / self.config.gravity_rho).powi(2);
        let origin = self.origin.clone();
        self.coord = self
            .coord
            .apply_force(&self.config, force, &origin, &mut self.rng);
    }
}

/// The median of `distances` (the upper one of an even count), or `None`
/// for none; how Consul ranks a datacenter by its servers' distances.
pub fn median(mut distances: Vec<Duration>) -> Option<Duration> {
    if distances.is_empty() {
        return None;
    }
    distances.sort();
    Some(distances[distances.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coord(vec: &[f64], height: f64, adjustment: f64) -> Coordinate {
        Coordinate {
            vec: vec.to_vec(),
            error: 0.0,
            adjustment,
            height,
        }
    }

    #[test]
    fn distance_adds_heights_and_adjustments_unless_negative() {
        let a = coord(&[0.0, 0.0, 0.0], 0.0, 0.0);
        let b = coord(&[3.0, 4.0, 0.0], 0.0, 0.0);
        assert_eq!(a.distance_to(&b), Duration::from_secs(5));
        let b_high = coord(&[3.0, 4.0, 0.0], 1.0, 0.5);
        assert_eq!(a.distance_to(&b_high), Duration::from_millis(6500));
        // An adjustment that would go negative is ignored.
        let b_neg = coord(&[3.0, 4.0, 0.0], 0.0, -10.0);
        assert_eq!(a.distance_to(&b_neg), Duration::from_secs(5));
        assert_eq!(a.distance_to(&coord(&[1.0], 0.0, 0.0)), Duration::MAX);
    }

    #[test]
    fn updates_refuse_bad_input() {
        let mut client = VivaldiClient::seeded(CoordinateConfig::default(), 1);
        let other = Coordinate::new(&CoordinateConfig::default());
        assert_eq!(
            client
                .update("x", &coord(&[1.0], 0.0, 0.0), Duration::from_millis(1))
                .unwrap_err(),
            CoordinateError::Incompatible
        );
        let mut nan = other.clone();
        nan.vec[3] = f64::NAN;
        assert_eq!(
            client
                .update("x", &nan, Duration::from_millis(1))
                .unwrap_err(),
            CoordinateError::Invalid
        );
        assert!(matches!(
            client.update("x", &other, Duration::from_secs(11)),
            Err(CoordinateError::BadRtt(_))
        ));
        // A zero round trip is fine (coarse clocks).
        assert!(client.update("x", &other, Duration::ZERO).is_ok());
    }

    #[test]
    fn one_observation_moves_the_coordinate_toward_the_truth() {
        let config = CoordinateConfig {
            dimensionality: 3,
            ..Default::default()
        };
        let mut client = VivaldiClient::seeded(config, 1);
        let other = coord(&[0.0, 0.0, 0.0], config.height_min, 0.0);
        let rtt = Duration::from_millis(100);
        for _ in 0..200 {
            client.update("other", &other, rtt).unwrap();
        }
        let estimate = client.distance_to(&other).as_secs_f64();
        assert!((estimate - 0.1).abs() < 0.01, "{estimate}");
        assert!(client.coordinate().error < 0.1, "{:?}", client.coordinate());
    }

    #[test]
    fn the_median_takes_the_middle_distance() {
        let ms = Duration::from_millis;
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![ms(5), ms(1), ms(3)]), Some(ms(3)));
        assert_eq!(median(vec![ms(4), ms(1)]), Some(ms(4)));
    }
}
