//! The simulated instance: its chips, its logical NeuronCores, and which of them this process
//! sees.
//!
//! As in the Neuron runtime, `NEURON_LOGICAL_NC_CONFIG` fuses physical cores into logical ones
//! and `NEURON_RT_VISIBLE_CORES` restricts the process to some logical cores, renumbered from
//! zero: with `NEURON_RT_VISIBLE_CORES=4-7`, `neuron:0` is the instance's logical core 4.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::figures::{Generation, InstanceFigures, INSTANCES, WIDE_TYPE_SLOWDOWN};
use crate::dtype::DType;

/// The variable naming the simulated instance type.
pub const INSTANCE_VAR: &str = "NEURONLAB_INSTANCE";
/// The Neuron runtime's logical NeuronCore configuration variable.
pub const LNC_VAR: &str = "NEURON_LOGICAL_NC_CONFIG";
/// The Neuron runtime's variable restricting which logical cores a process sees.
pub const VISIBLE_CORES_VAR: &str = "NEURON_RT_VISIBLE_CORES";

const CORE_LIST_SYNTAX: &str = "expected core indices and ranges like '0-3', '4' or '0,2,5-7'";

/// A NeuronCore as this process numbers it: `neuron:0` is the first visible core.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CoreId(pub u32);

impl fmt::Display for CoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "neuron:{}", self.0)
    }
}

/// Why a topology could not be built or a core could not be found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TopologyError {
    /// The instance name is not one of the presets.
    #[error("unknown instance '{name}': expected one of {}", instance_names())]
    UnknownInstance {
        /// The name asked for.
        name: String,
    },
    /// The logical NeuronCore configuration does not exist on this chip.
    #[error("LNC={value} is not valid for {instance}: use {}", or_list(valid))]
    InvalidLnc {
        /// The value asked for, as written.
        value: String,
        /// The instance it was asked for.
        instance: &'static str,
        /// The values that chip accepts.
        valid: &'static [u32],
    },
    /// A visible-core list could not be parsed.
    #[error("'{spec}' is not a valid core list: {problem}; {CORE_LIST_SYNTAX}")]
    InvalidCoreList {
        /// The list as written.
        spec: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A visible core does not exist on the instance.
    #[error(
        "core {index} does not exist on {instance} at LNC={lnc}: it has logical cores 0-{}",
        total.saturating_sub(1)
    )]
    CoreOutOfRange {
        /// The instance-wide logical index asked for.
        index: u32,
        /// The instance.
        instance: &'static str,
        /// Its logical core configuration.
        lnc: u32,
        /// How many logical cores it has.
        total: u32,
    },
    /// A core this process does not see.
    #[error(
        "{core} does not exist: this process sees {visible} NeuronCore(s), neuron:0 to neuron:{}; \
         {VISIBLE_CORES_VAR} selects which ones",
        visible.saturating_sub(1)
    )]
    UnknownCore {
        /// The core asked for.
        core: CoreId,
        /// How many cores the process sees (never zero).
        visible: u32,
    },
    /// An environment variable held a bad value; `problem` says what is wrong.
    #[error("invalid {var}: {problem}")]
    Variable {
        /// The variable's name.
        var: &'static str,
        /// The problem with its value.
        problem: Box<TopologyError>,
    },
}

fn instance_names() -> String {
    INSTANCES.map(|i| i.name).join(", ")
}

fn or_list(values: &[u32]) -> String {
    match values {
        [only] => only.to_string(),
        [init @ .., last] => {
            let init: Vec<String> = init.iter().map(u32::to_string).collect();
            format!("{} or {last}", init.join(", "))
        }
        [] => String::new(),
    }
}

/// The simulated instance and the logical cores this process sees.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    instance: &'static InstanceFigures,
    lnc: u32,
    /// Instance-wide logical index of each visible core: `visible[i]` is `neuron:i`.
    visible: Vec<u32>,
}

impl Topology {
    /// The named instance preset with all its logical cores visible.
    ///
    /// `lnc` is the logical NeuronCore configuration; `None` takes the chip's default (2 on
    /// Trainium2, 1 on Trainium1).
    pub fn preset(name: &str, lnc: Option<u32>) -> Result<Topology, TopologyError> {
        let instance = INSTANCES.iter().find(|i| i.name == name).ok_or_else(|| {
            TopologyError::UnknownInstance {
                name: name.to_string(),
            }
        })?;
        let lnc = lnc.unwrap_or(instance.chip.default_lnc);
        if !instance.chip.lnc_values.contains(&lnc) {
            return Err(TopologyError::InvalidLnc {
                value: lnc.to_string(),
                instance: instance.name,
                valid: instance.chip.lnc_values,
            });
        }
        let mut topology = Topology {
            instance,
            lnc,
            visible: Vec::new(),
        };
        topology.visible = (0..topology.total_cores()).collect();
        Ok(topology)
    }

    /// The topology the process environment describes; see [`Topology::from_vars`].
    pub fn from_env() -> Result<Topology, TopologyError> {
        Topology::from_vars(|name| std::env::var(name).ok())
    }

    /// The topology described by `NEURONLAB_INSTANCE` (default `trn2.48xlarge`),
    /// `NEURON_LOGICAL_NC_CONFIG` (default: the chip's) and `NEURON_RT_VISIBLE_CORES`
    /// (default: all), read through `get`. Empty values count as unset.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Topology, TopologyError> {
        let var = |name: &str| {
            get(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let in_var = |var: &'static str| {
            move |problem| TopologyError::Variable {
                var,
                problem: Box::new(problem),
            }
        };

        let name = var(INSTANCE_VAR).unwrap_or_else(|| INSTANCES[0].name.to_string());
        let base = Topology::preset(&name, None).map_err(in_var(INSTANCE_VAR))?;
        let topology = match var(LNC_VAR) {
            None => base,
            Some(text) => text
                .parse::<u32>()
                .ok()
                .and_then(|lnc| Topology::preset(&name, Some(lnc)).ok())
                .ok_or_else(|| TopologyError::InvalidLnc {
                    value: text.clone(),
                    instance: base.instance.name,
                    valid: base.instance.chip.lnc_values,
                })
                .map_err(in_var(LNC_VAR))?,
        };
        match var(VISIBLE_CORES_VAR) {
            None => Ok(topology),
            Some(spec) => parse_core_list(&spec)
                .and_then(|cores| topology.with_visible_cores(&cores))
                .map_err(in_var(VISIBLE_CORES_VAR)),
        }
    }

    /// This topology restricted to the given instance-wide logical cores, which become
    /// `neuron:0..n` in ascending order (as the Neuron runtime numbers them).
    pub fn with_visible_cores(mut self, cores: &[u32]) -> Result<Topology, TopologyError> {
        let total = self.total_cores();
        let mut visible = cores.to_vec();
        visible.sort_unstable();
        if let Some(&index) = visible.iter().find(|&&i| i >= total) {
            return Err(TopologyError::CoreOutOfRange {
                index,
                instance: self.instance.name,
                lnc: self.lnc,
                total,
            });
        }
        let spec = || {
            cores
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        if let Some(pair) = visible.windows(2).find(|w| w[0] == w[1]) {
            return Err(TopologyError::InvalidCoreList {
                spec: spec(),
                problem: format!("core {} is listed twice", pair[0]),
            });
        }
        if visible.is_empty() {
            return Err(TopologyError::InvalidCoreList {
                spec: spec(),
                problem: "it names no core".to_string(),
            });
        }
        self.visible = visible;
        Ok(self)
    }

    /// The instance name, e.g. `trn2.48xlarge`.
    pub fn instance_name(&self) -> &'static str {
        self.instance.name
    }

    /// The instance's published figures.
    pub fn instance(&self) -> &'static InstanceFigures {
        self.instance
    }

    /// The chip generation.
    pub fn generation(&self) -> Generation {
        self.instance.chip.generation
    }

    /// The logical NeuronCore configuration: physical cores per logical core.
    pub fn lnc(&self) -> u32 {
        self.lnc
    }

    /// Number of chips on the instance.
    pub fn chips(&self) -> u32 {
        self.instance.chips
    }

    /// Logical cores per chip (4 on Trainium2 at LNC=2).
    pub fn cores_per_chip(&self) -> u32 {
        self.instance.chip.physical_cores / self.lnc
    }

    /// Logical cores on the whole instance, visible or not.
    pub fn total_cores(&self) -> u32 {
        self.chips() * self.cores_per_chip()
    }

    /// Number of cores this process sees.
    pub fn num_cores(&self) -> usize {
        self.visible.len()
    }

    /// The cores this process sees, `neuron:0` first.
    pub fn cores(&self) -> impl Iterator<Item = CoreId> {
        (0..self.visible.len() as u32).map(CoreId)
    }

    /// The instance-wide logical index of a visible core.
    pub fn global_index(&self, core: CoreId) -> Result<u32, TopologyError> {
        self.visible
            .get(core.0 as usize)
            .copied()
            .ok_or(TopologyError::UnknownCore {
                core,
                visible: self.visible.len() as u32,
            })
    }

    /// The chip (0-based, instance-wide) a visible core is on.
    pub fn chip_of(&self, core: CoreId) -> Result<u32, TopologyError> {
        Ok(self.global_index(core)? / self.cores_per_chip())
    }

    /// Whether two visible cores are on the same chip (their traffic stays on the chip).
    pub fn same_chip(&self, a: CoreId, b: CoreId) -> Result<bool, TopologyError> {
        Ok(self.chip_of(a)? == self.chip_of(b)?)
    }

    /// HBM capacity of one logical core, bytes: the chip's HBM split evenly.
    pub fn hbm_bytes_per_core(&self) -> u64 {
        self.instance.chip.hbm_bytes / u64::from(self.cores_per_chip())
    }

    /// HBM bandwidth of one logical core, bytes/s: the chip's bandwidth split evenly.
    pub fn hbm_bandwidth(&self) -> f64 {
        self.per_core(self.instance.chip.hbm_bandwidth)
    }

    /// Peak dense TensorEngine throughput of one logical core for `dtype`, FLOP/s.
    ///
    /// 8- and 16-bit types use the BF16 figure, 32-bit types the FP32 figure, 64-bit types
    /// the FP32 figure divided by [`WIDE_TYPE_SLOWDOWN`] (a model assumption).
    pub fn tensor_flops(&self, dtype: DType) -> f64 {
        let chip = self.instance.chip;
        let flops = match dtype.size() {
            1 | 2 => chip.tensor_bf16_flops,
            4 => chip.tensor_fp32_flops,
            _ => chip.tensor_fp32_flops / WIDE_TYPE_SLOWDOWN,
        };
        self.per_core(flops)
    }

    /// VectorEngine throughput of one logical core for `dtype`, FLOP/s (elementwise
    /// arithmetic and reductions). The FP32 figure for types up to 32 bits.
    pub fn vector_flops(&self, dtype: DType) -> f64 {
        self.narrow_rate(self.instance.chip.vector_flops_per_core, dtype)
    }

    /// ScalarEngine throughput of one logical core for `dtype`, FLOP/s (transcendental
    /// activations). The FP32 figure for types up to 32 bits.
    pub fn scalar_flops(&self, dtype: DType) -> f64 {
        self.narrow_rate(self.instance.chip.scalar_flops_per_core, dtype)
    }

    /// Core-to-core bandwidth between logical cores on one chip, bytes/s.
    ///
    /// **Model assumption**: no such figure is published. Data moves between cores of a chip
    /// by DMA, so a core gets the chip's DMA bandwidth divided by the logical cores per chip.
    pub fn intra_chip_bandwidth(&self) -> f64 {
        self.per_core(self.instance.chip.dma_bandwidth)
    }

    /// Chip-to-chip bandwidth available to one logical core, bytes/s: the chip's NeuronLink
    /// bandwidth divided by the logical cores that share it.
    pub fn chip_to_chip_bandwidth(&self) -> f64 {
        self.per_core(self.instance.chip.link_bandwidth)
    }

    /// The bandwidth between two visible cores: intra-chip or chip-to-chip.
    pub fn link_bandwidth(&self, a: CoreId, b: CoreId) -> Result<f64, TopologyError> {
        Ok(if self.same_chip(a, b)? {
            self.intra_chip_bandwidth()
        } else {
            self.chip_to_chip_bandwidth()
        })
    }

    fn per_core(&self, chip_figure: f64) -> f64 {
        chip_figure / f64::from(self.cores_per_chip())
    }

    /// A per-physical-core FP32 rate, scaled to one logical core and to `dtype`.
    fn narrow_rate(&self, per_physical_core: f64, dtype: DType) -> f64 {
        let rate = per_physical_core * f64::from(self.lnc);
        if dtype.size() > 4 {
            rate / WIDE_TYPE_SLOWDOWN
        } else {
            rate
        }
    }
}

impl Topology {
    /// A multi-line description: the instance line, then the per-core figures the cost model
    /// uses, each labelled with its unit.
    pub fn report(&self) -> String {
        use crate::events::fmt::bytes;
        let tf = |flops: f64| format!("{:.1} TFLOPS", flops / 1e12);
        let bw = |b: f64| format!("{:.0} GB/s", b / 1e9);
        format!(
            "{self}\n\
             per logical core (chip figure / {} cores per chip):\n\
             \x20 TensorEngine  {} bf16, {} f32\n\
             \x20 VectorEngine  {} f32    ScalarEngine {} f32\n\
             \x20 HBM           {} at {}\n\
             \x20 on-chip link  {}    chip-to-chip {}",
            self.cores_per_chip(),
            tf(self.tensor_flops(DType::Bf16)),
            tf(self.tensor_flops(DType::F32)),
            tf(self.vector_flops(DType::F32)),
            tf(self.scalar_flops(DType::F32)),
            bytes(self.hbm_bytes_per_core()),
            bw(self.hbm_bandwidth()),
            bw(self.intra_chip_bandwidth()),
            bw(self.chip_to_chip_bandwidth()),
        )
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let chip = self.instance.chip;
        write!(
            f,
            "{}: {} x {} ({}), {} physical {} per chip, LNC={}: {} logical cores",
            self.instance.name,
            self.chips(),
            chip.generation,
            self.instance.interconnect,
            chip.physical_cores,
            chip.core_name,
            self.lnc,
            self.total_cores(),
        )?;
        if self.num_cores() < self.total_cores() as usize {
            write!(f, ", {} visible", self.num_cores())?;
        }
        Ok(())
    }
}

/// Parses a Neuron runtime core list: comma-separated indices and inclusive ranges, such as
/// `0-3`, `4` or `0,2,5-7`. Whitespace around items is ignored.
pub fn parse_core_list(spec: &str) -> Result<Vec<u32>, TopologyError> {
    let invalid = |problem: String| TopologyError::InvalidCoreList {
        spec: spec.to_string(),
        problem,
    };
    let index = |text: &str| {
        text.trim()
            .parse::<u32>()
            .map_err(|_| invalid(format!("'{}' is not a core index", text.trim())))
    };
    let mut cores = Vec::new();
    for item in spec.split(',') {
        match item.split_once('-') {
            Some((first, last)) => {
                let (first, last) = (index(first)?, index(last)?);
                if first > last {
                    return Err(invalid(format!("range {first}-{last} is backwards")));
                }
                cores.extend(first..=last);
            }
            None => cores.push(index(item)?),
        }
    }
    Ok(cores)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn trn2_presets_count_logical_cores() {
        let t = Topology::preset("trn2.48xlarge", None).unwrap();
        assert_eq!((t.lnc(), t.cores_per_chip(), t.num_cores()), (2, 4, 64));
        let t = Topology::preset("trn2.48xlarge", Some(1)).unwrap();
        assert_eq!((t.cores_per_chip(), t.num_cores()), (8, 128));
        let t = Topology::preset("trn2.3xlarge", None).unwrap();
        assert_eq!((t.chips(), t.num_cores()), (1, 4));
        let t = Topology::preset("trn1.32xlarge", None).unwrap();
        assert_eq!(
            (t.lnc(), t.num_cores(), t.generation()),
            (1, 32, Generation::Trainium1)
        );
        assert_eq!(
            Topology::preset("trn1.2xlarge", None).unwrap().num_cores(),
            2
        );
    }

    #[test]
    fn per_core_figures_divide_the_chip() {
        let t = Topology::preset("trn2.48xlarge", None).unwrap();
        assert_eq!(t.hbm_bytes_per_core(), 24 << 30); // 96 GiB / 4
        assert_eq!(t.hbm_bandwidth(), 725e9); // 2.9 TB/s / 4
        assert_eq!(t.tensor_flops(DType::Bf16), 166.75e12); // 667 / 4
        assert_eq!(t.tensor_flops(DType::F16), 166.75e12);
        assert_eq!(t.tensor_flops(DType::F32), 45.25e12); // 181 / 4
        assert_eq!(t.tensor_flops(DType::F64), 45.25e12 / 4.0);
        assert_eq!(t.vector_flops(DType::F32), 2e12); // 1 TFLOPS x 2 physical cores
        assert_eq!(t.scalar_flops(DType::Bf16), 2.4e12);
        assert_eq!(t.intra_chip_bandwidth(), 875e9); // 3.5 TB/s / 4
        assert_eq!(t.chip_to_chip_bandwidth(), 320e9); // 1.28 TB/s / 4

        let t = Topology::preset("trn2.48xlarge", Some(1)).unwrap();
        assert_eq!(t.hbm_bytes_per_core(), 12 << 30);
        assert_eq!(t.vector_flops(DType::F32), 1e12);

        let t = Topology::preset("trn1.32xlarge", None).unwrap();
        assert_eq!(t.hbm_bytes_per_core(), 16 << 30);
        assert_eq!(t.hbm_bandwidth(), 410e9);
        assert_eq!(t.tensor_flops(DType::Bf16), 95e12);
        assert_eq!(t.tensor_flops(DType::F32), 23.75e12);
        assert_eq!(t.vector_flops(DType::F32), 2.3e12);
    }

    #[test]
    fn bad_presets_say_what_is_valid() {
        let err = Topology::preset("trn3", None).unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown instance 'trn3': expected one of trn2.48xlarge, trn2.3xlarge, \
             trn1.32xlarge, trn1.2xlarge"
        );
        let err = Topology::preset("trn2.48xlarge", Some(3))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "LNC=3 is not valid for trn2.48xlarge: use 1 or 2");
        let err = Topology::preset("trn1.32xlarge", Some(2))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "LNC=2 is not valid for trn1.32xlarge: use 1");
    }

    #[test]
    fn chips_group_consecutive_logical_cores() {
        let t = Topology::preset("trn2.48xlarge", None).unwrap();
        assert_eq!(t.chip_of(CoreId(3)).unwrap(), 0);
        assert_eq!(t.chip_of(CoreId(4)).unwrap(), 1);
        assert!(t.same_chip(CoreId(0), CoreId(3)).unwrap());
        assert!(!t.same_chip(CoreId(3), CoreId(4)).unwrap());
        assert_eq!(t.link_bandwidth(CoreId(3), CoreId(4)).unwrap(), 320e9);
        let err = t.chip_of(CoreId(64)).unwrap_err().to_string();
        assert!(err.starts_with("neuron:64 does not exist: this process sees 64 NeuronCore(s)"));
    }

    #[test]
    fn defaults_come_from_the_environment() {
        let t = Topology::from_vars(vars(&[])).unwrap();
        assert_eq!(
            (t.instance_name(), t.lnc(), t.num_cores()),
            ("trn2.48xlarge", 2, 64)
        );
        let t = Topology::from_vars(vars(&[(INSTANCE_VAR, "trn1.2xlarge"), (LNC_VAR, " ")]));
        assert_eq!(t.unwrap().num_cores(), 2);
        let t = Topology::from_vars(vars(&[(LNC_VAR, "1")])).unwrap();
        assert_eq!(t.num_cores(), 128);
    }

    #[test]
    fn visible_cores_are_renumbered_from_zero() {
        let t = Topology::from_vars(vars(&[(VISIBLE_CORES_VAR, "6-7, 2,4")])).unwrap();
        assert_eq!(t.num_cores(), 4);
        let globals: Vec<u32> = t.cores().map(|c| t.global_index(c).unwrap()).collect();
        assert_eq!(globals, [2, 4, 6, 7]);
        // neuron:1 is global core 4, the first core of chip 1.
        assert_eq!(t.chip_of(CoreId(1)).unwrap(), 1);
        assert!(t.same_chip(CoreId(2), CoreId(3)).unwrap());
        assert!(t.to_string().ends_with("64 logical cores, 4 visible"));
    }

    #[test]
    fn bad_variables_are_named_with_the_accepted_syntax() {
        let err =
            |pairs: &[(&str, &str)]| Topology::from_vars(vars(pairs)).unwrap_err().to_string();
        assert_eq!(
            err(&[(INSTANCE_VAR, "trn3")]),
            "invalid NEURONLAB_INSTANCE: unknown instance 'trn3': expected one of \
             trn2.48xlarge, trn2.3xlarge, trn1.32xlarge, trn1.2xlarge"
        );
        assert_eq!(
            err(&[(LNC_VAR, "two")]),
            "invalid NEURON_LOGICAL_NC_CONFIG: LNC=two is not valid for trn2.48xlarge: use 1 or 2"
        );
        assert_eq!(
            err(&[(INSTANCE_VAR, "trn1.32xlarge"), (LNC_VAR, "2")]),
            "invalid NEURON_LOGICAL_NC_CONFIG: LNC=2 is not valid for trn1.32xlarge: use 1"
        );
        assert_eq!(
            err(&[(VISIBLE_CORES_VAR, "0-x")]),
            "invalid NEURON_RT_VISIBLE_CORES: '0-x' is not a valid core list: 'x' is not a core \
             index; expected core indices and ranges like '0-3', '4' or '0,2,5-7'"
        );
        assert!(err(&[(VISIBLE_CORES_VAR, "3-1")]).contains("range 3-1 is backwards"));
        assert!(err(&[(VISIBLE_CORES_VAR, "0-3,2")]).contains("core 2 is listed twice"));
        assert_eq!(
            err(&[(INSTANCE_VAR, "trn2.3xlarge"), (VISIBLE_CORES_VAR, "4")]),
            "invalid NEURON_RT_VISIBLE_CORES: core 4 does not exist on trn2.3xlarge at LNC=2: \
             it has logical cores 0-3"
        );
    }

    #[test]
    fn core_ids_display_as_devices() {
        assert_eq!(CoreId(3).to_string(), "neuron:3");
        assert_eq!(serde_json::to_string(&CoreId(3)).unwrap(), "3");
    }
}
