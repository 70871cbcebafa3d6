//! YCSB's key and operation generators, ported from its Java sources.
//!
//! This module owns the random choices a YCSB-style run makes: which operation comes next
//! ([`Workload`], for the core workloads A, B, C, D and F) and which key it touches
//! ([`KeyChooser`], built from [`UniformGenerator`], [`ZipfianGenerator`],
//! [`ScrambledZipfianGenerator`] and [`SkewedLatestGenerator`]). Each generator is a port of
//! the class of the same name in YCSB's `core/src/main/java/site/ycsb/generator/`. Its
//! arithmetic is done in the same order and in the same types (`f64` for Java's `double`,
//! Java's truncating `(long)` casts), so a given uniform draw gives the item YCSB gives.
//! Every generator exposes that mapping as a pure function of the draw (`next_value_from`,
//! [`UniformGenerator::value_from_bits`], [`Workload::operation_from`]), and a `next` that
//! takes the draw from a [`RandomSource`] such as [`SplitMix64`].
//!
//! Where the port differs from YCSB, and why:
//!
//! - Randomness: YCSB draws from `ThreadLocalRandom`. Here the caller passes a seeded
//!   [`RandomSource`], so runs are reproducible. The sequence of draws is not Java's. The
//!   Java constructors of `ZipfianGenerator` and `SkewedLatestGenerator` also make one
//!   draw and discard it. These constructors take no source, so they don't.
//! - `Math.abs(Long.MIN_VALUE)` is negative in Java. [`fnvhash64`] keeps that and returns
//!   `i64::MIN` when FNV-1a gives `-2^63`. Java's scrambled zipfian would then return a key
//!   below `min`. No value below 2^48 hashes to `-2^63`: a meet-in-the-middle search over
//!   all of them found none, and the same search finds the preimages of known hashes. The
//!   zipfian values YCSB scrambles stay below 2^48 (they are at most
//!   [`ScrambledZipfianGenerator::ITEM_COUNT`] + 1), so Java never takes that branch there,
//!   and neither does the port (it hashes only the draws of theta 0.99). Were it taken, the
//!   port uses `2^63 % item_count` and the key stays in range.
//!   [`UniformGenerator`] does the same for the raw draw `0x8000_0000_0000_0000`.
//! - [`ScrambledZipfianGenerator`] with a theta other than 0.99: YCSB would compute zeta over
//!   its 10^10 + 1 items, which takes minutes. The port draws a plain zipfian over the
//!   range's own items instead, then scatters them by a permutation of the range (not the
//!   FNV scramble, which would leave about a third of the items never drawn).
//! - YCSB's `ZipfianGenerator` can recompute zeta from scratch when the item count shrinks,
//!   behind a private flag, `allowitemcountdecrease`. That flag is always false, and only
//!   that behaviour is ported.
//! - Several things are ported as they are, so that the draws match YCSB. When the item
//!   count grows, `eta` is recomputed from the constructor's item count. The scrambled
//!   zipfian always draws over `ITEM_COUNT` + 1 items. The "latest" distribution
//!   practically never returns key 0 (see [`SkewedLatestGenerator`]).
//!
//! ```
//! use megalon_workload::generator::Operation;
//! use megalon_workload::{KeyChooser, SplitMix64, Workload};
//!
//! let workload = Workload::A;
//! let mut rng = SplitMix64::new(42);
//! let mut keys = KeyChooser::for_core_workload(&workload, 1_000, 10_000)?;
//! for _ in 0..100 {
//!     let key = keys.next(&mut rng);
//!     assert!(key < 1_000);
//!     match workload.next_operation(&mut rng) {
//!         Operation::Read | Operation::Update => {}
//!         other => unreachable!("workload A has no {other}"),
//!     }
//! }
//! # Ok::<(), megalon_workload::GeneratorError>(())
//! ```

use std::fmt;

use crate::fnv::fnv1a64;

/// YCSB's default zipfian constant, `ZipfianGenerator.ZIPFIAN_CONSTANT`.
pub const ZIPFIAN_CONSTANT: f64 = 0.99;

/// The largest item, and the largest item count, a generator takes. YCSB counts in Java
/// `long`s, so this is `i64::MAX`. Below it, `base + item_count` cannot overflow a `u64`.
pub const MAX_ITEM: u64 = i64::MAX as u64;

/// The fewest inserted items the "latest" distribution works with. YCSB builds its zipfian
/// over `inserted - 1` items, so with fewer than 2 that zipfian would be empty.
pub const MIN_LATEST_ITEM_COUNT: u64 = 2;

/// `2^-53`: a 53-bit integer times this is a double in `[0, 1)`, as in Java's
/// `Random.nextDouble`.
const F64_UNIT: f64 = 1.0 / (1u64 << 53) as f64;

/// Parameters a generator cannot be built with.
#[derive(Clone, Copy, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum GeneratorError {
    /// An item count of zero: every generator needs at least one item.
    #[error("a generator needs at least one item")]
    NoItems,
    /// `min..=max` is empty, reaches past [`MAX_ITEM`], or holds more than [`MAX_ITEM`]
    /// items.
    #[error("the item range {min}..={max} is empty or does not fit a Java long (at most {limit})")]
    Range {
        /// The smallest item asked for.
        min: u64,
        /// The largest item asked for.
        max: u64,
        /// [`MAX_ITEM`].
        limit: u64,
    },
    /// A zipfian constant outside `[0, 1)`. Gray et al.'s method divides by `1 - theta`.
    #[error("zipfian constant {theta} is outside [0, 1)")]
    Theta {
        /// The constant asked for.
        theta: f64,
    },
    /// A precomputed zeta that cannot be zeta of one or more items (it must be finite and at
    /// least 1).
    #[error("precomputed zeta {zeta_n} is not a finite number of at least 1")]
    Zeta {
        /// The zeta given.
        zeta_n: f64,
    },
    /// Too few items inserted for the "latest" distribution.
    #[error(
        "the latest distribution needs at least {min_item_count} inserted items, got {item_count}"
    )]
    TooFewItems {
        /// The item count given.
        item_count: u64,
        /// [`MIN_LATEST_ITEM_COUNT`].
        min_item_count: u64,
    },
    /// Operation proportions that are negative, not finite, or all zero.
    #[error("operation proportions {proportions:?} must be finite, non-negative and not all zero")]
    Proportions {
        /// The proportions given.
        proportions: OperationProportions,
    },
}

/// A source of uniform 64-bit draws.
///
/// The generators take their randomness from one of these, so a seeded source makes a run
/// reproducible.
pub trait RandomSource {
    /// The next 64 uniformly random bits.
    fn next_u64(&mut self) -> u64;

    /// A uniform double in `[0, 1)`, built from the top 53 bits of [`next_u64`]. This is
    /// the resolution of Java's `Random.nextDouble`.
    ///
    /// [`next_u64`]: RandomSource::next_u64
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * F64_UNIT
    }
}

/// Steele, Lea and Flood's SplitMix64: a small, fast, seeded generator. It passes BigCrush
/// and is plenty for choosing keys. It is not for anything that must be unpredictable.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator whose sequence is fixed by `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }
}

impl RandomSource for SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// YCSB's `Utils.fnvhash64`: FNV-1a 64 over the 8 little-endian bytes of `value`,
/// then Java's `Math.abs` of the result as a signed `long`.
///
/// FNV-1a starts from the offset basis `0xcbf29ce484222325`, and for each byte does
/// `hash ^= byte; hash *= 1099511628211` (wrapping). Like `Math.abs`, the absolute value
/// leaves `i64::MIN` negative. So the result is in `0..=i64::MAX`, or `i64::MIN` for inputs
/// whose hash is `-2^63`. No input in `0..2^48` has that hash (see the module docs).
pub fn fnvhash64(value: i64) -> i64 {
    (fnv1a64(&value.to_le_bytes()) as i64).wrapping_abs()
}

/// YCSB's `ZipfianGenerator.zetastatic(n, theta)`: the sum over `i` in `0..item_count` of
/// `1 / (i + 1)^theta`, added up in that order.
///
/// This takes time linear in `item_count`: about a second per 10^8 items.
pub fn zeta(item_count: u64, theta: f64) -> f64 {
    zeta_from(0, item_count, theta, 0.0)
}

/// YCSB's incremental `zetastatic(st, n, theta, initialsum)`: `initial_sum` (zeta of
/// `start_count` items) plus the terms for items `start_count..item_count`.
pub fn zeta_from(start_count: u64, item_count: u64, theta: f64, initial_sum: f64) -> f64 {
    let mut sum = initial_sum;
    for i in start_count..item_count {
        sum += 1.0 / ((i + 1) as f64).powf(theta);
    }
    sum
}

/// Gray et al.'s `eta`, written as in YCSB: `(1 - (2/n)^(1-theta)) / (1 - zeta(2)/zeta(n))`.
fn eta(item_count: u64, theta: f64, zeta_2_theta: f64, zeta_n: f64) -> f64 {
    (1.0 - (2.0 / item_count as f64).powf(1.0 - theta)) / (1.0 - zeta_2_theta / zeta_n)
}

fn check_theta(theta: f64) -> Result<(), GeneratorError> {
    if (0.0..1.0).contains(&theta) {
        Ok(())
    } else {
        Err(GeneratorError::Theta { theta })
    }
}

/// Checks `min..=max` and returns its item count.
fn range_item_count(min: u64, max: u64) -> Result<u64, GeneratorError> {
    let error = GeneratorError::Range {
        min,
        max,
        limit: MAX_ITEM,
    };
    if min > max || max > MAX_ITEM || max - min >= MAX_ITEM {
        return Err(error);
    }
    Ok(max - min + 1)
}

/// YCSB's `ZipfianGenerator`: items `base..base + item_count`, with item `base` the most
/// popular, `base + 1` the next, and so on.
///
/// This is the algorithm of Gray et al., "Quickly Generating Billion-Record Synthetic
/// Databases", SIGMOD 1994, as YCSB has it. For a uniform draw `u` in `[0, 1)` over `n`
/// items: with `uz = u * zeta_n`, the item is `base` if `uz < 1`, and `base + 1` if
/// `uz < 1 + 0.5^theta`. Otherwise it is `base + (n * (eta*u - eta + 1)^alpha) as long`,
/// where `alpha = 1/(1 - theta)` and `eta` is as in [`ZipfianGenerator::eta`].
///
/// When a draw of `u` lands within a few ulps of 1, `(eta*u - eta + 1)^alpha` can round
/// to 1, and YCSB then returns `base + n`, one past the range. The port keeps that.
/// [`KeyChooser`] draws again instead, as YCSB's `CoreWorkload.nextKeynum` does.
#[derive(Clone, Debug)]
pub struct ZipfianGenerator {
    /// YCSB's `items`: the constructor's item count. YCSB never updates it, not even in
    /// `eta` when the item count grows.
    item_count: u64,
    base: u64,
    theta: f64,
    alpha: f64,
    zeta_n: f64,
    eta: f64,
    zeta_2_theta: f64,
    /// `0.5^theta`. YCSB computes it at every draw, with the same result.
    half_pow_theta: f64,
    count_for_zeta: u64,
}

impl ZipfianGenerator {
    /// Items `0..item_count` with zipfian constant `theta` (YCSB: `new ZipfianGenerator(items,
    /// theta)`). This computes zeta over `item_count` items, in time linear in it.
    pub fn new(item_count: u64, theta: f64) -> Result<Self, GeneratorError> {
        let last = item_count.checked_sub(1).ok_or(GeneratorError::NoItems)?;
        Self::with_range(0, last, theta)
    }

    /// Items `min..=max` (YCSB: `new ZipfianGenerator(min, max, theta)`). This computes zeta
    /// over `max - min + 1` items.
    pub fn with_range(min: u64, max: u64, theta: f64) -> Result<Self, GeneratorError> {
        let item_count = range_item_count(min, max)?;
        check_theta(theta)?;
        Self::with_zeta_n(min, max, theta, zeta(item_count, theta))
    }

    /// Items `min..=max`, with zeta of `max - min + 1` items precomputed as `zeta_n` (YCSB:
    /// `new ZipfianGenerator(min, max, theta, zetan)`). The value of `zeta_n` is trusted,
    /// as YCSB trusts it.
    pub fn with_zeta_n(
        min: u64,
        max: u64,
        theta: f64,
        zeta_n: f64,
    ) -> Result<Self, GeneratorError> {
        let item_count = range_item_count(min, max)?;
        check_theta(theta)?;
        if !(zeta_n.is_finite() && zeta_n >= 1.0) {
            return Err(GeneratorError::Zeta { zeta_n });
        }
        let zeta_2_theta = zeta(2, theta);
        Ok(Self {
            item_count,
            base: min,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zeta_n,
            eta: eta(item_count, theta, zeta_2_theta, zeta_n),
            zeta_2_theta,
            half_pow_theta: 0.5f64.powf(theta),
            count_for_zeta: item_count,
        })
    }

    /// The item for the uniform draw `u` in `[0, 1)` (YCSB: `nextValue()`, which is
    /// `nextLong(items)`).
    pub fn next_value_from(&self, u: f64) -> u64 {
        self.map(self.item_count, u)
    }

    /// The next item, drawn from `rng`.
    pub fn next<R: RandomSource + ?Sized>(&self, rng: &mut R) -> u64 {
        self.next_value_from(rng.next_f64())
    }

    /// The item for the draw `u` when there are now `item_count` items (YCSB:
    /// `nextLong(itemcount)`).
    ///
    /// If `item_count` is more than zeta was computed for, zeta is extended by the terms
    /// of the new items, and `eta` is recomputed. As in YCSB, `eta` uses the constructor's
    /// item count, not `item_count`. A smaller `item_count` keeps zeta and `eta` as they
    /// are, as YCSB does with `allowitemcountdecrease` false. Either way, the last step
    /// scales by `item_count`.
    pub fn next_long_from(&mut self, item_count: u64, u: f64) -> u64 {
        debug_assert!(
            item_count <= MAX_ITEM,
            "{item_count} items is past {MAX_ITEM}"
        );
        if item_count > self.count_for_zeta {
            self.zeta_n = zeta_from(self.count_for_zeta, item_count, self.theta, self.zeta_n);
            self.count_for_zeta = item_count;
            self.eta = eta(self.item_count, self.theta, self.zeta_2_theta, self.zeta_n);
        }
        self.map(item_count, u)
    }

    /// [`next_long_from`](Self::next_long_from) with a draw from `rng`.
    pub fn next_long<R: RandomSource + ?Sized>(&mut self, item_count: u64, rng: &mut R) -> u64 {
        self.next_long_from(item_count, rng.next_f64())
    }

    fn map(&self, item_count: u64, u: f64) -> u64 {
        debug_assert!(
            (0.0..1.0).contains(&u),
            "uniform draw {u} is outside [0, 1)"
        );
        let uz = u * self.zeta_n;
        if uz < 1.0 {
            return self.base;
        }
        if uz < 1.0 + self.half_pow_theta {
            return self.base + 1;
        }
        // Java's `(long)` truncates toward zero and saturates, and `as u64` does too for the
        // non-negative values this can give. A NaN becomes 0 in both.
        let offset = (item_count as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        self.base.saturating_add(offset)
    }

    /// The constructor's item count (YCSB's `items`).
    pub fn item_count(&self) -> u64 {
        self.item_count
    }

    /// The most popular item (YCSB's `base`, the range's `min`).
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The zipfian constant.
    pub fn theta(&self) -> f64 {
        self.theta
    }

    /// `1 / (1 - theta)`.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Zeta over [`count_for_zeta`](Self::count_for_zeta) items.
    pub fn zeta_n(&self) -> f64 {
        self.zeta_n
    }

    /// `(1 - (2/items)^(1-theta)) / (1 - zeta(2)/zeta_n)`, with the constructor's `items`.
    pub fn eta(&self) -> f64 {
        self.eta
    }

    /// How many items [`zeta_n`](Self::zeta_n) sums over.
    pub fn count_for_zeta(&self) -> u64 {
        self.count_for_zeta
    }
}

/// YCSB's `ScrambledZipfianGenerator`: zipfian popularity, but with the popular items
/// scattered over `min..=max` instead of clustered at `min`.
///
/// With theta 0.99 (YCSB's only precomputed case), this draws from a [`ZipfianGenerator`]
/// over `0..=ITEM_COUNT` with zeta [`ZETAN`](Self::ZETAN). That is `ITEM_COUNT + 1` items:
/// YCSB passes `ITEM_COUNT` as the inclusive maximum. It returns
/// `min + fnvhash64(value) % item_count`. The zipfian does not depend on the range, so the
/// range changes which keys are hot but not how skewed the draws are (see YCSB issue
/// #1305). With another theta, YCSB would compute zeta over `ITEM_COUNT + 1` items (and at
/// a theta of 0.7 over 250,000 keys, the most popular 250,000 of its ten billion ranks
/// hold about 4% of the draws: nearly uniform). This port uses a zipfian over the range's
/// own `item_count` items instead, as the skewed workloads it serves mean (Tigon's zipf
/// 0.7), and scatters the ranks over the items by a permutation, not the hash: a hash
/// modulo the count maps several ranks to one item and none to about a third of them.
#[derive(Clone, Debug)]
pub struct ScrambledZipfianGenerator {
    min: u64,
    max: u64,
    item_count: u64,
    zipfian: ZipfianGenerator,
    /// For a theta other than 0.99, how ranks map to items (a permutation of the range).
    permutation: Option<Permutation>,
}

/// A permutation of `0..count` that scatters a zipfian's ranks over the items:
/// `(rank * multiplier + offset) % count`, the multiplier prime to the count, so that
/// each item is exactly one rank's.
#[derive(Clone, Copy, Debug)]
struct Permutation {
    multiplier: u64,
    offset: u64,
}

impl Permutation {
    fn of_count(count: u64) -> Self {
        // About 0.618 of the count (the golden ratio's fraction: Fibonacci hashing), so
        // that neighbouring ranks land far apart whatever the count; then the first one
        // up that is prime to it. The offset, FNV's offset basis, moves rank 0 off item 0.
        let golden = (u128::from(count) * 0x9e37_79b9_7f4a_7c15) >> 64;
        let mut multiplier = (golden as u64).max(1);
        while gcd(multiplier, count) != 1 {
            multiplier = if multiplier + 1 >= count {
                1
            } else {
                multiplier + 1
            };
        }
        Self {
            multiplier,
            offset: 0xcbf2_9ce4_8422_2325 % count,
        }
    }

    fn of(self, rank: u64, count: u64) -> u64 {
        // In 64 bits while it fits (ranks and multipliers below 2^32, any count a pod
        // holds): a 128-bit remainder is a call into the runtime on every draw.
        match rank
            .checked_mul(self.multiplier)
            .and_then(|mixed| mixed.checked_add(self.offset))
        {
            Some(mixed) => mixed % count,
            None => {
                let mixed =
                    u128::from(rank) * u128::from(self.multiplier) + u128::from(self.offset);
                (mixed % u128::from(count)) as u64
            }
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl ScrambledZipfianGenerator {
    /// YCSB's `ITEM_COUNT`: the inclusive maximum of the zipfian that is scrambled.
    /// YCSB's current master has 10^16 here. With 10^16, `ZETAN` below no longer matches,
    /// since zeta(10^16, 0.99) is about 45.12. This port keeps 10^10, the value `ZETAN`
    /// was computed for.
    pub const ITEM_COUNT: u64 = 10_000_000_000;
    /// YCSB's `ZETAN`: zeta(10^10, 0.99), precomputed.
    pub const ZETAN: f64 = 26.46902820178302;
    /// YCSB's `USED_ZIPFIAN_CONSTANT`: the theta `ZETAN` was computed for.
    pub const USED_ZIPFIAN_CONSTANT: f64 = 0.99;

    /// Items `0..item_count`, theta 0.99 (YCSB: `new ScrambledZipfianGenerator(items)`).
    pub fn new(item_count: u64) -> Result<Self, GeneratorError> {
        if item_count == 0 {
            return Err(GeneratorError::NoItems);
        }
        Self::with_range(0, item_count - 1)
    }

    /// Items `min..=max`, theta 0.99 (YCSB: `new ScrambledZipfianGenerator(min, max)`).
    pub fn with_range(min: u64, max: u64) -> Result<Self, GeneratorError> {
        Self::with_theta(min, max, ZIPFIAN_CONSTANT)
    }

    /// Items `min..=max` with zipfian constant `theta`. For 0.99 this is YCSB exactly.
    /// For any other theta, the zipfian is over the range's own items (see the type's
    /// docs), which takes time linear in their count.
    pub fn with_theta(min: u64, max: u64, theta: f64) -> Result<Self, GeneratorError> {
        let item_count = range_item_count(min, max)?;
        check_theta(theta)?;
        let (zipfian, permutation) = if theta == Self::USED_ZIPFIAN_CONSTANT {
            let zipfian = ZipfianGenerator::with_zeta_n(0, Self::ITEM_COUNT, theta, Self::ZETAN)?;
            (zipfian, None)
        } else {
            let zipfian = ZipfianGenerator::with_range(0, item_count - 1, theta)?;
            (zipfian, Some(Permutation::of_count(item_count)))
        };
        Ok(Self {
            min,
            max,
            item_count,
            zipfian,
            permutation,
        })
    }

    /// The item for the uniform draw `u` in `[0, 1)` (YCSB: `nextValue()`).
    pub fn next_value_from(&self, u: f64) -> u64 {
        self.item_of_rank(self.zipfian.next_value_from(u))
    }

    /// The item the zipfian's draw `rank` (0 the most popular) stands for.
    pub fn item_of_rank(&self, rank: u64) -> u64 {
        let offset = match self.permutation {
            None => scramble(rank, self.item_count),
            Some(permutation) => permutation.of(rank, self.item_count),
        };
        self.min + offset
    }

    /// The next item, drawn from `rng`.
    pub fn next<R: RandomSource + ?Sized>(&self, rng: &mut R) -> u64 {
        self.next_value_from(rng.next_f64())
    }

    /// The smallest item.
    pub fn min(&self) -> u64 {
        self.min
    }

    /// The largest item.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// `max - min + 1`.
    pub fn item_count(&self) -> u64 {
        self.item_count
    }

    /// The zipfian whose draws are scrambled.
    pub fn zipfian(&self) -> &ZipfianGenerator {
        &self.zipfian
    }
}

/// `fnvhash64(value) % item_count`, the scramble of a zipfian draw.
fn scramble(value: u64, item_count: u64) -> u64 {
    debug_assert!(value <= MAX_ITEM);
    scramble_hash(fnvhash64(value as i64), item_count)
}

/// Java's `hash % itemcount`, for a `hash` that `Math.abs` made non-negative. The exception
/// is `i64::MIN`. Java would give a remainder of `-(2^63 % item_count)` for it, and so a key
/// below `min`. Here it gives `2^63 % item_count`, in range. It is unreachable for draws
/// below 2^48 (module docs).
fn scramble_hash(hash: i64, item_count: u64) -> u64 {
    hash.unsigned_abs() % item_count
}

/// YCSB's `SkewedLatestGenerator` (workload D's "latest"): the most recently inserted items
/// are the most popular.
///
/// It follows a counter of inserted items. YCSB's counter starts at the number of records
/// loaded, `n`, and its `lastValue()` is `n - 1`. The zipfian is built over `n - 1` items.
/// Each draw is `max - zipfian.nextLong(max)`, where `max` is the counter's current
/// `lastValue()`. The zipfian draw is in `0..max`, practically never `max` itself, so
/// the key is in `1..=max`. Key 0, the oldest, is practically never drawn. That is
/// YCSB's behaviour, and the port keeps it.
///
/// The counter lives in the generator and is advanced by [`insert`](Self::insert). To
/// share inserts between threads, each thread keeps its own generator and calls
/// [`advance_to`](Self::advance_to) with the shared count.
#[derive(Clone, Debug)]
pub struct SkewedLatestGenerator {
    /// The counter's `lastValue()`: the newest inserted key.
    last_item: u64,
    zipfian: ZipfianGenerator,
}

impl SkewedLatestGenerator {
    /// Over keys `0..inserted_item_count`, theta 0.99 (YCSB: `new
    /// SkewedLatestGenerator(new CounterGenerator(inserted_item_count))`). Computes zeta
    /// over `inserted_item_count - 1` items.
    pub fn new(inserted_item_count: u64) -> Result<Self, GeneratorError> {
        Self::with_theta(inserted_item_count, ZIPFIAN_CONSTANT)
    }

    /// As [`new`](Self::new) with zipfian constant `theta`. YCSB always uses 0.99.
    pub fn with_theta(inserted_item_count: u64, theta: f64) -> Result<Self, GeneratorError> {
        if inserted_item_count < MIN_LATEST_ITEM_COUNT {
            return Err(GeneratorError::TooFewItems {
                item_count: inserted_item_count,
                min_item_count: MIN_LATEST_ITEM_COUNT,
            });
        }
        let last_item = inserted_item_count - 1;
        Ok(Self {
            last_item,
            zipfian: ZipfianGenerator::new(last_item, theta)?,
        })
    }

    /// The key for the uniform draw `u` in `[0, 1)` (YCSB: `nextValue()`). Takes `&mut self`
    /// because the first draw after inserts extends zeta to the new count.
    pub fn next_value_from(&mut self, u: f64) -> u64 {
        let max = self.last_item;
        let offset = self.zipfian.next_long_from(max, u);
        debug_assert!(offset <= max, "zipfian over {max} items gave {offset}");
        max.saturating_sub(offset)
    }

    /// The next key, drawn from `rng`.
    pub fn next<R: RandomSource + ?Sized>(&mut self, rng: &mut R) -> u64 {
        self.next_value_from(rng.next_f64())
    }

    /// Counts one insert and returns its key, the next one after the newest. This is
    /// YCSB's `CounterGenerator.nextValue()`. The key is drawable at once, as if the insert
    /// had been acknowledged.
    pub fn insert(&mut self) -> u64 {
        debug_assert!(self.last_item < MAX_ITEM);
        self.last_item += 1;
        self.last_item
    }

    /// Sets the inserted count to `inserted_item_count` if that is more than now. A smaller
    /// count is ignored: YCSB's counter never goes back.
    pub fn advance_to(&mut self, inserted_item_count: u64) {
        debug_assert!(inserted_item_count <= MAX_ITEM);
        self.last_item = self.last_item.max(inserted_item_count.saturating_sub(1));
    }

    /// How many keys have been inserted: the newest key is this minus 1.
    pub fn inserted_item_count(&self) -> u64 {
        self.last_item + 1
    }

    /// The zipfian that picks how far back from the newest key to go.
    pub fn zipfian(&self) -> &ZipfianGenerator {
        &self.zipfian
    }
}

/// YCSB's `UniformLongGenerator`: every item in `lower..=upper` equally likely.
///
/// YCSB computes `Math.abs(nextLong()) % interval + lower`, where
/// `interval = upper - lower + 1`. It uses 64 random bits, not a double. For the one draw
/// `0x8000_0000_0000_0000`, `Math.abs` stays negative and Java returns an item below
/// `lower`. The port uses `2^63 % interval` there and stays in range.
#[derive(Clone, Debug)]
pub struct UniformGenerator {
    lower: u64,
    upper: u64,
    interval: u64,
}

impl UniformGenerator {
    /// Items `lower..=upper`.
    pub fn new(lower: u64, upper: u64) -> Result<Self, GeneratorError> {
        let interval = range_item_count(lower, upper)?;
        Ok(Self {
            lower,
            upper,
            interval,
        })
    }

    /// The item for the 64 random bits `bits` (YCSB: `nextValue()`, where `bits` is what
    /// `ThreadLocalRandom.nextLong()` returned).
    pub fn value_from_bits(&self, bits: u64) -> u64 {
        (bits as i64).unsigned_abs() % self.interval + self.lower
    }

    /// The next item, drawn from `rng`.
    pub fn next<R: RandomSource + ?Sized>(&self, rng: &mut R) -> u64 {
        self.value_from_bits(rng.next_u64())
    }

    /// The smallest item.
    pub fn lower(&self) -> u64 {
        self.lower
    }

    /// The largest item.
    pub fn upper(&self) -> u64 {
        self.upper
    }
}

/// One operation of a YCSB core workload. A is `Update`-heavy, B and C are read-mostly,
/// D inserts, and F does read-modify-writes. Scans (workload E) are not ported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Operation {
    /// Read one record.
    Read,
    /// Overwrite one record.
    Update,
    /// Insert a new record.
    Insert,
    /// Read a record, then write it.
    ReadModifyWrite,
}

impl Operation {
    /// Every operation, in the order YCSB's `CoreWorkload.createOperationGenerator` adds
    /// them to its `DiscreteGenerator` (read, update, insert, scan, read-modify-write; scan
    /// is not ported).
    pub const ALL: [Operation; 4] = [
        Operation::Read,
        Operation::Update,
        Operation::Insert,
        Operation::ReadModifyWrite,
    ];
}

impl fmt::Display for Operation {
    /// YCSB's names: `READ`, `UPDATE`, `INSERT`, `READMODIFYWRITE`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Read => "READ",
            Operation::Update => "UPDATE",
            Operation::Insert => "INSERT",
            Operation::ReadModifyWrite => "READMODIFYWRITE",
        })
    }
}

/// How often each [`Operation`] comes, as in YCSB's `readproportion`, `updateproportion`,
/// `insertproportion` and `readmodifywriteproportion`. The proportions need not add up to 1:
/// YCSB divides each by their sum.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OperationProportions {
    /// `readproportion`.
    pub read: f64,
    /// `updateproportion`.
    pub update: f64,
    /// `insertproportion`.
    pub insert: f64,
    /// `readmodifywriteproportion`.
    pub read_modify_write: f64,
}

impl OperationProportions {
    /// The proportion of `operation`.
    pub fn of(&self, operation: Operation) -> f64 {
        match operation {
            Operation::Read => self.read,
            Operation::Update => self.update,
            Operation::Insert => self.insert,
            Operation::ReadModifyWrite => self.read_modify_write,
        }
    }
}

/// YCSB's `requestdistribution`: how keys are chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KeyDistribution {
    /// `uniform`: [`UniformGenerator`].
    Uniform,
    /// A plain [`ZipfianGenerator`], key 0 the most popular. YCSB uses it for scan
    /// lengths, not keys.
    Zipfian {
        /// The zipfian constant, in `[0, 1)`.
        theta: f64,
    },
    /// `zipfian`: [`ScrambledZipfianGenerator`], YCSB's exact one for theta 0.99.
    ScrambledZipfian {
        /// The zipfian constant, in `[0, 1)`. YCSB fixes it at [`ZIPFIAN_CONSTANT`].
        theta: f64,
    },
    /// `latest`: [`SkewedLatestGenerator`].
    Latest {
        /// The zipfian constant, in `[0, 1)`. YCSB fixes it at [`ZIPFIAN_CONSTANT`].
        theta: f64,
    },
}

/// A YCSB core workload: its operation mix and its key distribution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Workload {
    name: &'static str,
    proportions: OperationProportions,
    key_distribution: KeyDistribution,
}

const YCSB_ZIPFIAN: KeyDistribution = KeyDistribution::ScrambledZipfian {
    theta: ZIPFIAN_CONSTANT,
};

impl Workload {
    /// Workload A, update heavy: read 0.5, update 0.5, zipfian.
    pub const A: Workload = Workload::core("A", [0.5, 0.5, 0.0, 0.0], YCSB_ZIPFIAN);
    /// Workload B, read mostly: read 0.95, update 0.05, zipfian.
    pub const B: Workload = Workload::core("B", [0.95, 0.05, 0.0, 0.0], YCSB_ZIPFIAN);
    /// Workload C, read only: read 1.0, zipfian.
    pub const C: Workload = Workload::core("C", [1.0, 0.0, 0.0, 0.0], YCSB_ZIPFIAN);
    /// Workload D, read latest: read 0.95, insert 0.05, latest.
    pub const D: Workload = Workload::core(
        "D",
        [0.95, 0.0, 0.05, 0.0],
        KeyDistribution::Latest {
            theta: ZIPFIAN_CONSTANT,
        },
    );
    /// Workload F, read-modify-write: read 0.5, read-modify-write 0.5, zipfian.
    pub const F: Workload = Workload::core("F", [0.5, 0.0, 0.0, 0.5], YCSB_ZIPFIAN);
    /// The five core workloads ported, in order.
    pub const CORE: [Workload; 5] = [Self::A, Self::B, Self::C, Self::D, Self::F];

    const fn core(
        name: &'static str,
        [read, update, insert, read_modify_write]: [f64; 4],
        key_distribution: KeyDistribution,
    ) -> Workload {
        Workload {
            name,
            proportions: OperationProportions {
                read,
                update,
                insert,
                read_modify_write,
            },
            key_distribution,
        }
    }

    /// A workload of your own. Every proportion must be finite and non-negative, and at
    /// least one must be positive.
    pub fn new(
        name: &'static str,
        proportions: OperationProportions,
        key_distribution: KeyDistribution,
    ) -> Result<Workload, GeneratorError> {
        let values = Operation::ALL.map(|operation| proportions.of(operation));
        let valid =
            values.iter().all(|p| p.is_finite() && *p >= 0.0) && values.iter().any(|p| *p > 0.0);
        if !valid {
            return Err(GeneratorError::Proportions { proportions });
        }
        Ok(Self::core(name, values, key_distribution))
    }

    /// The operation for the uniform draw `u` in `[0, 1)`, as YCSB's
    /// `DiscreteGenerator.nextValue()` maps it.
    ///
    /// The operations with a positive proportion are taken in [`Operation::ALL`] order.
    /// For each, `p = proportion / sum`: if `u < p` it is chosen, otherwise `u -= p` and the
    /// next is tried. If rounding leaves `u` past the last operation, Java throws an
    /// `AssertionError`. The port returns the last operation instead.
    pub fn operation_from(&self, u: f64) -> Operation {
        debug_assert!(
            (0.0..1.0).contains(&u),
            "uniform draw {u} is outside [0, 1)"
        );
        let mut sum = 0.0;
        for operation in Operation::ALL {
            sum += self.proportions.of(operation);
        }
        let mut remaining = u;
        let mut last = Operation::Read;
        for operation in Operation::ALL {
            let proportion = self.proportions.of(operation);
            if proportion <= 0.0 {
                continue;
            }
            last = operation;
            let share = proportion / sum;
            if remaining < share {
                return operation;
            }
            remaining -= share;
        }
        last
    }

    /// The next operation, drawn from `rng`.
    pub fn next_operation<R: RandomSource + ?Sized>(&self, rng: &mut R) -> Operation {
        self.operation_from(rng.next_f64())
    }

    /// The workload's letter: `"A"`, `"B"`, ... (or the name given to [`Workload::new`]).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The operation mix.
    pub fn proportions(&self) -> OperationProportions {
        self.proportions
    }

    /// How keys are chosen.
    pub fn key_distribution(&self) -> KeyDistribution {
        self.key_distribution
    }
}

/// The generator behind a [`KeyChooser`].
#[derive(Clone, Debug)]
enum KeyGenerator {
    Uniform(UniformGenerator),
    Zipfian(ZipfianGenerator),
    ScrambledZipfian(ScrambledZipfianGenerator),
    Latest(SkewedLatestGenerator),
}

/// Chooses keys in `0..item_count` for one thread, with any [`KeyDistribution`], and
/// counts inserts.
///
/// It plays the role of YCSB's `CoreWorkload` key choice. [`next`](Self::next) is its
/// `nextKeynum`: it draws again while the key has not been inserted yet (`key >=
/// item_count`). [`insert`](Self::insert) is `transactioninsertkeysequence`. As in YCSB,
/// only "latest" moves towards new keys. The uniform and zipfian choosers keep the range
/// they were built with.
#[derive(Clone, Debug)]
pub struct KeyChooser {
    generator: KeyGenerator,
    distribution: KeyDistribution,
    item_count: u64,
}

impl KeyChooser {
    /// Keys in `0..item_count`, each generator built over exactly that range.
    pub fn new(distribution: KeyDistribution, item_count: u64) -> Result<Self, GeneratorError> {
        let last = item_count.checked_sub(1).ok_or(GeneratorError::NoItems)?;
        Self::build(distribution, item_count, last)
    }

    /// The key chooser YCSB's `CoreWorkload.init` builds for `workload` after loading
    /// `record_count` records, for a run of `operation_count` operations.
    ///
    /// Uniform is over `0..record_count`. Latest starts from `record_count` inserted.
    /// Zipfian is YCSB's scrambled zipfian over `0..=record_count + expected_new_keys`, with
    /// `expected_new_keys = (operation_count * insert_proportion * 2.0) as int`. That is one
    /// key more than exists, even with no inserts. The draws past the last inserted key
    /// are drawn again. For A, B, C and F, which insert nothing, the range is
    /// `0..=record_count`.
    pub fn for_core_workload(
        workload: &Workload,
        record_count: u64,
        operation_count: u64,
    ) -> Result<Self, GeneratorError> {
        let last_record = record_count.checked_sub(1).ok_or(GeneratorError::NoItems)?;
        let draw_max = match workload.key_distribution {
            KeyDistribution::Uniform | KeyDistribution::Latest { .. } => last_record,
            KeyDistribution::Zipfian { .. } | KeyDistribution::ScrambledZipfian { .. } => {
                let expected_new_keys =
                    (operation_count as f64 * workload.proportions.insert * 2.0) as u64;
                record_count.saturating_add(expected_new_keys)
            }
        };
        Self::build(workload.key_distribution, record_count, draw_max)
    }

    /// A chooser with `item_count` keys inserted, whose generator draws from `0..=draw_max`.
    fn build(
        distribution: KeyDistribution,
        item_count: u64,
        draw_max: u64,
    ) -> Result<Self, GeneratorError> {
        let generator = match distribution {
            KeyDistribution::Uniform => KeyGenerator::Uniform(UniformGenerator::new(0, draw_max)?),
            KeyDistribution::Zipfian { theta } => {
                KeyGenerator::Zipfian(ZipfianGenerator::with_range(0, draw_max, theta)?)
            }
            KeyDistribution::ScrambledZipfian { theta } => KeyGenerator::ScrambledZipfian(
                ScrambledZipfianGenerator::with_theta(0, draw_max, theta)?,
            ),
            KeyDistribution::Latest { theta } => {
                KeyGenerator::Latest(SkewedLatestGenerator::with_theta(item_count, theta)?)
            }
        };
        Ok(Self {
            generator,
            distribution,
            item_count,
        })
    }

    /// The next key, in `0..item_count()`.
    pub fn next<R: RandomSource + ?Sized>(&mut self, rng: &mut R) -> u64 {
        loop {
            let key = match &mut self.generator {
                KeyGenerator::Uniform(generator) => generator.next(rng),
                KeyGenerator::Zipfian(generator) => generator.next(rng),
                KeyGenerator::ScrambledZipfian(generator) => generator.next(rng),
                KeyGenerator::Latest(generator) => generator.next(rng),
            };
            // Only keys not inserted yet are drawn again. These are a plain zipfian's
            // rounding edge (one past its range, rare), or the `expected_new_keys + 1` keys
            // past the end that a core workload's zipfian draws over. Some key below
            // `item_count` always has a positive probability, so this ends.
            if key < self.item_count {
                return key;
            }
        }
    }

    /// Counts one insert and returns the new key, `item_count()` before the call.
    pub fn insert(&mut self) -> u64 {
        let key = self.item_count;
        self.item_count += 1;
        if let KeyGenerator::Latest(generator) = &mut self.generator {
            let latest = generator.insert();
            debug_assert_eq!(latest, key);
        }
        key
    }

    /// Raises the count of keys that exist to `item_count` (keys other threads inserted);
    /// a smaller count is ignored. "Latest" then favours the newest of them.
    pub fn advance_to(&mut self, item_count: u64) {
        if item_count <= self.item_count {
            return;
        }
        self.item_count = item_count;
        if let KeyGenerator::Latest(generator) = &mut self.generator {
            generator.advance_to(item_count);
        }
    }

    /// How many keys exist: the keys drawn are below this.
    pub fn item_count(&self) -> u64 {
        self.item_count
    }

    /// The distribution it was built with.
    pub fn distribution(&self) -> KeyDistribution {
        self.distribution
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asserts `actual` is within `1e-12` of `expected`, relative.
    fn assert_close(actual: f64, expected: f64, what: &str) {
        assert!(
            (actual - expected).abs() <= 1e-12 * expected.abs().max(1.0),
            "{what}: {actual} != {expected}"
        );
    }

    // Items = 10, theta = 0.99, by hand. `1/(i+1)^0.99` for i = 0..10 is
    // 1, 0.50348, 0.33702, 0.25349, 0.20324, 0.16968, 0.14566, 0.12763, 0.11358, 0.10233.
    //   zeta2 = 1 + 0.5^0.99 = 1.50347777502836
    //   zetan = the sum of the ten terms = 2.95610751651036
    //   alpha = 1/(1 - 0.99) = 100 (99.99999999999991 in doubles: 1 - 0.99 is 0.01000...09)
    //   eta   = (1 - (2/10)^0.01) / (1 - zeta2/zetan)
    //         = (1 - 0.98403) / (1 - 0.50860) = 0.01597 / 0.49140 = 0.0324900
    //   thresholds: uz < 1 gives item 0, i.e. u < 1/2.9561 = 0.33828;
    //               uz < 1 + 0.50348 gives item 1, i.e. u < 0.50860.
    //   u = 0.05: uz = 0.14781 < 1, so item 0.
    //   u = 0.5:  uz = 1.47805 < 1.50348, so item 1.
    //   u = 0.6:  1 - eta*0.4 = 0.987004; ^100 = e^(100 * ln 0.987004) = e^-1.30811 = 0.270328;
    //             * 10 = 2.703, so item 2.
    //   u = 0.9:  1 - eta*0.1 = 0.996751; ^100 = e^-0.32543 = 0.722218; * 10 = 7.222, item 7.
    //   u = 0.99: 1 - eta*0.01 = 0.999675; ^100 = 0.968027; * 10 = 9.680, item 9.
    const ZETA_10: f64 = 2.956_107_516_510_363_6;
    const ETA_10: f64 = 0.032_489_973_618_745_19;

    #[test]
    fn zipfian_maps_draws_as_computed_by_hand() {
        let zipfian = ZipfianGenerator::new(10, 0.99).unwrap();
        assert_close(zipfian.zeta_n(), ZETA_10, "zetan");
        assert_close(zipfian.eta(), ETA_10, "eta");
        assert_close(zipfian.alpha(), 100.0, "alpha");
        let cases = [(0.0, 0), (0.05, 0), (0.5, 1), (0.6, 2), (0.9, 7), (0.99, 9)];
        for (u, item) in cases {
            assert_eq!(zipfian.next_value_from(u), item, "u = {u}");
        }
        // The same draws over 100..=109 are shifted by the base.
        let shifted = ZipfianGenerator::with_range(100, 109, 0.99).unwrap();
        for (u, item) in cases {
            assert_eq!(shifted.next_value_from(u), 100 + item, "u = {u}");
        }
    }

    // Growing from 10 to 11 items, by hand, as YCSB's nextLong(11) does it:
    //   zetan' = 2.9561075 + 1/11^0.99 = 2.9561075 + 0.0931153 = 3.0492229
    //   eta'   = (1 - (2/10)^0.01) / (1 - 1.5034778/3.0492229)   <- 10, the constructor's items
    //          = 0.0159656 / 0.5069308 = 0.0314945
    //   u = 0.6: 1 - eta'*0.4 = 0.987402; ^100 = 0.281455; * 11 = 3.096, so 3.
    //            (With 11 in eta, as Gray et al. have it, eta = 0.0333438 and the item is 2.)
    //   u = 0.97: 1 - eta'*0.03 = 0.999055; ^100 = 0.909802; * 11 = 10.008, so 10.
    //   Then nextLong(10): no recompute (no decrease allowed), zetan' and eta' stay;
    //   u = 0.9: 1 - eta'*0.1 = 0.996851; ^100 = 0.729466; * 10 = 7.295, so 7.
    #[test]
    fn zipfian_grows_zeta_incrementally_and_keeps_the_first_eta() {
        let mut zipfian = ZipfianGenerator::new(10, 0.99).unwrap();
        assert_eq!(zipfian.next_long_from(11, 0.6), 3);
        assert_eq!(zipfian.count_for_zeta(), 11);
        assert_close(zipfian.zeta_n(), ZETA_10 + 1.0 / 11f64.powf(0.99), "zetan'");
        assert_close(zipfian.eta(), 0.031_494_546_396_169_165, "eta'");
        assert_eq!(zipfian.next_long_from(11, 0.97), 10);
        assert_eq!(zipfian.next_long_from(10, 0.9), 7);
        assert_eq!(
            zipfian.count_for_zeta(),
            11,
            "a smaller count does not recompute"
        );
        assert_eq!(zipfian.item_count(), 10);
    }

    #[test]
    fn fnv_matches_hand_computation() {
        // fnvhash64(1), bytes 01 00 00 00 00 00 00 00, step by step (hash ^= b; hash *= prime):
        //   0xaf63bc4c8601b62c, 0x082f2207b4e88cc4, 0xd0a397186727310c, 0xad2aca7747985764,
        //   0xd80d6caea7dc7eec, 0xfb4e98c73babab04, 0xb2389e8a64b397cc, 0x89cd31291d2aefa4.
        // 0x89cd31291d2aefa4 as a long is -8517097267634966620; Math.abs gives its negation.
        assert_eq!(fnv1a64(&1i64.to_le_bytes()), 0x89cd_3129_1d2a_efa4);
        assert_eq!(fnvhash64(1), 8_517_097_267_634_966_620);
        // 0: FNV-1a of eight zero bytes is 0xa8c7f832281a39c5 = -6284781860667377211 as a long.
        assert_eq!(fnvhash64(0), 6_284_781_860_667_377_211);
        // 97: 0x6926124a7b1433c4 has its top bit clear, so Math.abs leaves it.
        assert_eq!(fnvhash64(97), 0x6926_124a_7b14_33c4);
        // -1, bytes ff * 8: 0x8cf51a8bfca3883d = -8289690350564177859.
        assert_eq!(fnvhash64(-1), 8_289_690_350_564_177_859);
        // The one hash Math.abs cannot make positive: 2^63 % 1000 = 808 instead of Java's -808.
        assert_eq!(scramble_hash(i64::MIN, 1000), 808);
        assert_eq!(scramble_hash(6_284_781_860_667_377_211, 1000), 211);
    }

    // ScrambledZipfian over 1000 items, by hand. The zipfian is over 0..=10^10 (n = 10^10 + 1)
    // with zetan = ZETAN = 26.469028201783:
    //   eta = (1 - (2/n)^0.01) / (1 - 1.5034778/26.469028) = 0.2001468 / 0.9431986 = 0.2122000
    //   item 0 for u < 1/zetan = 0.03778; item 1 for u < (1 + 0.5^0.99)/zetan = 0.05680.
    //   u = 0.01: item 0, fnvhash64(0) = 6284781860667377211, % 1000 = 211.
    //   u = 0.05: item 1, fnvhash64(1) = 8517097267634966620, % 1000 = 620.
    //   u = 0.5:  1 - eta*0.5 = 0.8939; ^100 = 1.34553e-5; * n = 134552.85, item 134552,
    //             fnvhash64 = 6595293188871280260, % 1000 = 260.
    //   u = 0.9:  1 - eta*0.1 = 0.978780; ^100 = 0.117087; * n = 1170869537.33,
    //             fnvhash64 = 1947785993254781670, % 1000 = 670.
    #[test]
    fn scrambled_zipfian_first_steps_match_hand_computation() {
        let scrambled = ScrambledZipfianGenerator::new(1000).unwrap();
        let zipfian = scrambled.zipfian();
        assert_eq!(zipfian.item_count(), 10_000_000_001);
        assert_eq!(zipfian.zeta_n(), ScrambledZipfianGenerator::ZETAN);
        assert_close(zipfian.eta(), 0.212_200_033_809_674_06, "eta");
        let cases = [
            (0.01, 0, 211),
            (0.05, 1, 620),
            (0.5, 134_552, 260),
            (0.9, 1_170_869_537, 670),
        ];
        let shifted = ScrambledZipfianGenerator::with_range(5000, 5999).unwrap();
        for (u, item, key) in cases {
            assert_eq!(zipfian.next_value_from(u), item, "u = {u}");
            assert_eq!(scrambled.next_value_from(u), key, "u = {u}");
            assert_eq!(shifted.next_value_from(u), 5000 + key, "u = {u}");
        }
    }

    #[test]
    fn scrambled_zipfian_with_other_theta_uses_own_items() {
        let scrambled = ScrambledZipfianGenerator::with_theta(0, 9, 0.5).unwrap();
        assert_eq!(scrambled.zipfian().item_count(), 10);
        assert_close(scrambled.zipfian().zeta_n(), zeta(10, 0.5), "zetan");
        let mut rng = SplitMix64::new(7);
        for _ in 0..10_000 {
            assert!(scrambled.next(&mut rng) < 10, "seed 7");
        }
    }

    /// With a theta other than 0.99 the scramble is a permutation of the range: every
    /// item is some rank's, and one rank's only, so the draws are a zipfian over all of
    /// the items. (A hash modulo the count, as for 0.99, left about two fifths of the items
    /// never drawn and gave others two or three ranks' mass: zipf 0.7 over 250,000 keys
    /// drew from 149,772 of them, and the figures' "less skewed" workloads ran on a
    /// smaller dataset than they said.)
    #[test]
    fn scrambled_zipfian_with_other_theta_gives_every_item_one_rank() {
        for count in [1u64, 2, 3, 10, 97, 1000, 4096, 250_000] {
            // (The 64-bit product overflows past 2^32 items: there the 128-bit one is
            // used, checked below on its own.)
            let min = 5;
            let scrambled =
                ScrambledZipfianGenerator::with_theta(min, min + count - 1, 0.7).unwrap();
            let mut ranks = vec![None; count as usize];
            for rank in 0..count {
                let item = scrambled.item_of_rank(rank);
                assert!((min..min + count).contains(&item), "{count} items: {item}");
                let at = &mut ranks[(item - min) as usize];
                assert_eq!(
                    *at, None,
                    "{count} items: ranks {at:?} and {rank} both give {item}"
                );
                *at = Some(rank);
            }
        }
        // Both products give the same item where both fit, and the 128-bit one stays a
        // permutation of a count past 2^32 (checked on ranks around the overflow).
        let permutation = Permutation::of_count(1000);
        for rank in 0..1000 {
            let mixed = u128::from(rank) * u128::from(permutation.multiplier)
                + u128::from(permutation.offset);
            assert_eq!(permutation.of(rank, 1000), (mixed % 1000) as u64);
        }
        let count = (1u64 << 40) + 7;
        let permutation = Permutation::of_count(count);
        let ranks: Vec<u64> = (0..2000u64).chain(count - 2000..count).collect();
        // Neighbouring ranks land far apart (at least a tenth of the items), whatever the
        // count (a multiplier of the golden ratio's fraction modulo the count could be 3).
        for small in [1000u64, 40_000, 250_000, 18_000_000] {
            let permutation = Permutation::of_count(small);
            for rank in 0..100 {
                let (a, b) = (permutation.of(rank, small), permutation.of(rank + 1, small));
                let apart = a.abs_diff(b).min(small - a.abs_diff(b));
                assert!(
                    apart >= small / 10,
                    "{small} items: ranks {rank}, +1 at {a}, {b}"
                );
            }
        }
        let items: std::collections::HashSet<u64> = ranks
            .iter()
            .map(|&rank| permutation.of(rank, count))
            .collect();
        assert_eq!(
            items.len(),
            ranks.len(),
            "distinct ranks give distinct items"
        );
        assert!(items.iter().all(|&item| item < count));
        // And the draws reach them: 100,000 draws over 1,000 items at theta 0.7 (the
        // coldest item's chance is about 1 in 13,000 a draw).
        let scrambled = ScrambledZipfianGenerator::with_theta(0, 999, 0.7).unwrap();
        let mut rng = SplitMix64::new(11);
        let mut drawn = vec![false; 1000];
        for _ in 0..100_000 {
            drawn[scrambled.next(&mut rng) as usize] = true;
        }
        let reached = drawn.iter().filter(|&&d| d).count();
        assert!(reached >= 990, "{reached} of 1,000 items drawn");
    }

    // SkewedLatest after loading 11 records: the counter's lastValue is max = 10 and the
    // zipfian is over 10 items, the same numbers as above. next = max - zipfian:
    //   u = 0.05 -> 10 - 0 = 10; u = 0.5 -> 10 - 1 = 9; u = 0.6 -> 10 - 2 = 8; u = 0.9 -> 10 - 7 = 3.
    // One insert (key 11): max = 11, and the zipfian grows to 11 items as computed above:
    //   u = 0.6 -> 11 - 3 = 8; u = 0.97 -> 11 - 10 = 1.
    #[test]
    fn skewed_latest_matches_hand_computation() {
        let mut latest = SkewedLatestGenerator::new(11).unwrap();
        assert_eq!(latest.zipfian().item_count(), 10);
        for (u, key) in [(0.05, 10), (0.5, 9), (0.6, 8), (0.9, 3)] {
            assert_eq!(latest.next_value_from(u), key, "u = {u}");
        }
        assert_eq!(latest.insert(), 11);
        assert_eq!(latest.inserted_item_count(), 12);
        assert_eq!(latest.next_value_from(0.6), 8);
        assert_eq!(latest.next_value_from(0.97), 1);
        assert_eq!(
            latest.next_value_from(0.01),
            11,
            "the newest key is the most popular"
        );
        latest.advance_to(5);
        assert_eq!(
            latest.inserted_item_count(),
            12,
            "the counter never goes back"
        );
        latest.advance_to(20);
        assert_eq!(latest.next_value_from(0.01), 19);
        assert_eq!(
            SkewedLatestGenerator::new(1).unwrap_err(),
            GeneratorError::TooFewItems {
                item_count: 1,
                min_item_count: MIN_LATEST_ITEM_COUNT
            }
        );
    }

    #[test]
    fn uniform_stays_in_bounds_and_covers_them() {
        let uniform = UniformGenerator::new(10, 19).unwrap();
        // Math.abs(bits as long) % 10 + 10.
        assert_eq!(uniform.value_from_bits(0), 10);
        assert_eq!(uniform.value_from_bits(9), 19);
        assert_eq!(uniform.value_from_bits(10), 10);
        assert_eq!(uniform.value_from_bits(12_345), 15);
        assert_eq!(uniform.value_from_bits(u64::MAX), 11, "-1 -> abs 1");
        assert_eq!(
            uniform.value_from_bits((1 << 63) + 5),
            13,
            "abs = 2^63 - 5, ends in 3"
        );
        assert_eq!(
            uniform.value_from_bits(1 << 63),
            18,
            "2^63 % 10, where Java goes below"
        );
        let seed = 11;
        let mut rng = SplitMix64::new(seed);
        let mut seen = [0u32; 10];
        for _ in 0..10_000 {
            let value = uniform.next(&mut rng);
            assert!((10..=19).contains(&value), "seed {seed}: {value}");
            seen[(value - 10) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 900), "seed {seed}: {seen:?}");
        assert!(UniformGenerator::new(5, 4).is_err());
        assert!(UniformGenerator::new(0, u64::MAX).is_err());
        assert!(UniformGenerator::new(0, MAX_ITEM - 1).is_ok());
    }

    #[test]
    fn workload_operations_follow_the_discrete_generator() {
        // Boundaries, with u < p chosen and u >= p passed on.
        assert_eq!(Workload::A.operation_from(0.499_999), Operation::Read);
        assert_eq!(Workload::A.operation_from(0.5), Operation::Update);
        assert_eq!(Workload::B.operation_from(0.95), Operation::Update);
        assert_eq!(Workload::C.operation_from(0.999_999), Operation::Read);
        assert_eq!(Workload::D.operation_from(0.949_999), Operation::Read);
        assert_eq!(Workload::D.operation_from(0.95), Operation::Insert);
        assert_eq!(Workload::F.operation_from(0.5), Operation::ReadModifyWrite);
        // Proportions over many draws: 200k draws, sigma <= 0.0012, tolerance 0.006.
        let seed = 2024;
        let mut rng = SplitMix64::new(seed);
        let draws = 200_000;
        for workload in Workload::CORE {
            let mut counts = [0u32; 4];
            for _ in 0..draws {
                let operation = workload.next_operation(&mut rng);
                counts[Operation::ALL.iter().position(|o| *o == operation).unwrap()] += 1;
            }
            for (operation, count) in Operation::ALL.into_iter().zip(counts) {
                let expected = workload.proportions().of(operation);
                let seen = f64::from(count) / f64::from(draws);
                assert!(
                    (seen - expected).abs() < 0.006,
                    "seed {seed}, workload {}: {operation} {seen} != {expected}",
                    workload.name()
                );
            }
        }
    }

    #[test]
    fn workload_rejects_bad_proportions() {
        let zero = OperationProportions {
            read: 0.0,
            update: 0.0,
            insert: 0.0,
            read_modify_write: 0.0,
        };
        assert!(Workload::new("zero", zero, KeyDistribution::Uniform).is_err());
        let negative = OperationProportions {
            read: -1.0,
            update: 2.0,
            ..zero
        };
        assert!(Workload::new("negative", negative, KeyDistribution::Uniform).is_err());
        let weights = OperationProportions {
            read: 3.0,
            update: 1.0,
            ..zero
        };
        let workload = Workload::new("3:1", weights, KeyDistribution::Uniform).unwrap();
        assert_eq!(workload.operation_from(0.74), Operation::Read);
        assert_eq!(workload.operation_from(0.75), Operation::Update);
    }

    #[test]
    fn zipfian_rank_zero_is_the_most_frequent() {
        let seed = 99;
        let zipfian = ZipfianGenerator::new(1000, 0.99).unwrap();
        let mut rng = SplitMix64::new(seed);
        let draws = 100_000;
        let mut counts = vec![0u32; 1001];
        for _ in 0..draws {
            counts[zipfian.next(&mut rng) as usize] += 1;
        }
        let (top, _) = counts.iter().enumerate().max_by_key(|(_, n)| **n).unwrap();
        assert_eq!(top, 0, "seed {seed}: {:?}", &counts[..10]);
        assert!(
            counts[0] > counts[1] && counts[1] > counts[2],
            "seed {seed}"
        );
        // Item 0 is drawn exactly when u < 1/zetan.
        let expected = 1.0 / zipfian.zeta_n();
        let seen = f64::from(counts[0]) / f64::from(draws);
        assert!(
            (seen - expected).abs() < 0.005,
            "seed {seed}: {seen} != {expected}"
        );
    }

    #[test]
    fn key_chooser_draws_inserted_keys_only() {
        let seed = 5;
        let mut rng = SplitMix64::new(seed);
        let distributions = [
            KeyDistribution::Uniform,
            KeyDistribution::Zipfian { theta: 0.8 },
            KeyDistribution::ScrambledZipfian { theta: 0.99 },
            KeyDistribution::ScrambledZipfian { theta: 0.5 },
            KeyDistribution::Latest { theta: 0.99 },
        ];
        for distribution in distributions {
            let mut chooser = KeyChooser::new(distribution, 100).unwrap();
            for _ in 0..10_000 {
                assert!(
                    chooser.next(&mut rng) < 100,
                    "seed {seed}, {distribution:?}"
                );
            }
            assert_eq!(chooser.insert(), 100);
            assert_eq!(chooser.item_count(), 101);
        }
        // Latest moves to the new keys: after 50 inserts the newest is the most drawn.
        let mut latest = KeyChooser::for_core_workload(&Workload::D, 100, 1000).unwrap();
        for _ in 0..50 {
            latest.insert();
        }
        let mut newest = 0;
        for _ in 0..10_000 {
            let key = latest.next(&mut rng);
            assert!(key < 150, "seed {seed}: {key}");
            newest += u32::from(key == 149);
        }
        assert!(
            newest > 1_000,
            "seed {seed}: the newest key came {newest} times"
        );
        // YCSB's zipfian for A draws over 0..=record_count and redraws the key past the end.
        let mut a = KeyChooser::for_core_workload(&Workload::A, 1000, 1000).unwrap();
        for _ in 0..10_000 {
            assert!(a.next(&mut rng) < 1000, "seed {seed}");
        }
    }

    #[test]
    fn bad_parameters_answer_errors() {
        assert_eq!(
            ZipfianGenerator::new(10, 1.0).unwrap_err(),
            GeneratorError::Theta { theta: 1.0 }
        );
        assert!(ZipfianGenerator::new(10, -0.1).is_err());
        assert!(ZipfianGenerator::new(10, f64::NAN).is_err());
        assert_eq!(
            ZipfianGenerator::new(0, 0.99).unwrap_err(),
            GeneratorError::NoItems
        );
        assert!(ZipfianGenerator::with_zeta_n(0, 9, 0.99, 0.5).is_err());
        assert!(ScrambledZipfianGenerator::new(0).is_err());
        assert!(KeyChooser::new(KeyDistribution::Uniform, 0).is_err());
        assert!(KeyChooser::new(KeyDistribution::Latest { theta: 0.99 }, 1).is_err());
    }

    #[test]
    fn advance_to_takes_other_threads_inserts() {
        let mut rng = SplitMix64::new(7);
        let mut latest = KeyChooser::for_core_workload(&Workload::D, 100, 1000).unwrap();
        latest.advance_to(150);
        latest.advance_to(120); // never back
        assert_eq!(latest.item_count(), 150);
        let newest = (0..10_000).filter(|_| latest.next(&mut rng) == 149).count();
        assert!(newest > 1_000, "the newest key came {newest} times");
        assert_eq!(latest.insert(), 150);
        let mut uniform = KeyChooser::new(KeyDistribution::Uniform, 10).unwrap();
        uniform.advance_to(20);
        assert_eq!(uniform.item_count(), 20);
        assert!(
            (0..1_000).all(|_| uniform.next(&mut rng) < 10),
            "uniform keeps its range"
        );
    }

    #[test]
    fn split_mix_64_matches_the_reference() {
        // SplitMix64 from state 0: the reference implementation's first outputs.
        let mut rng = SplitMix64::new(0);
        assert_eq!(rng.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(rng.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(rng.next_u64(), 0x06c4_5d18_8009_454f);
        let mut rng = SplitMix64::new(1);
        for _ in 0..10_000 {
            let u = rng.next_f64();
            assert!((0.0..1.0).contains(&u), "seed 1: {u}");
        }
    }
}
