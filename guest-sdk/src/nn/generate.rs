//! Text generation with a [`LlamaForCausalLM`]: greedy or seeded sampling (temperature,
//! top-k, top-p, applied in that order as `transformers` does), with a dynamic or a static
//! [`KvCache`], each step a compiled function.
//!
//! Under compile the two caches behave as they do on Neuron. The dynamic cache feeds every
//! decode step a longer cache, a new shape, so each token recompiles until the recompile
//! limit and the rest run eagerly (with the compiler's warning). The static cache keeps one
//! shape: decode compiles once, and prefill compiles once per prompt bucket, the prompt
//! padded to a multiple of `prefill_bucket` (128, the TensorEngine's tile) with the padding
//! hidden by the causal mask and later overwritten.

use std::time::Duration;

use super::cache::{CacheKind, KvCache};
use super::layers::in_dtype;
use super::llama::LlamaForCausalLM;
use super::scalar;
use crate::autograd::no_grad;
use crate::compile::{compile_with, CompileOptions, CompileStats, Compiled};
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::ops::IndexSelectOptions;
use crate::output::device_time;
use crate::tensor::{from_slice, Tensor};

/// How to generate: the length, the decoding strategy, the cache and compilation.
#[derive(Clone, Debug)]
pub struct GenerationConfig {
    /// Tokens to generate at most.
    pub max_new_tokens: usize,
    /// Sample from the distribution (else greedy: the first most likely token).
    pub do_sample: bool,
    /// Logits are divided by this before sampling.
    pub temperature: f64,
    /// Keep only the `top_k` most likely tokens when sampling (0 keeps all).
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches `top_p`.
    pub top_p: f64,
    /// The sampler's seed.
    pub seed: u64,
    /// Tokens that end the generation (kept in the output); `None` takes the model config's.
    pub eos_token_id: Option<Vec<i64>>,
    /// The cache.
    pub cache: CacheKind,
    /// The static cache's length; `None` rounds the prompt plus `max_new_tokens` up to a
    /// multiple of `prefill_bucket`.
    pub max_cache_len: Option<i64>,
    /// Prompt lengths for a static cache's prefill are padded to multiples of this.
    pub prefill_bucket: i64,
    /// Run each step as a compiled function (else eagerly).
    pub compile: bool,
    /// The recompile limit of the compiled steps.
    pub recompile_limit: i64,
    /// Keep each step's logits in the output.
    pub keep_logits: bool,
}

impl GenerationConfig {
    /// Greedy decoding of up to `max_new_tokens` tokens with a static cache, compiled.
    pub fn new(max_new_tokens: usize) -> GenerationConfig {
        GenerationConfig {
            max_new_tokens,
            do_sample: false,
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            eos_token_id: None,
            cache: CacheKind::Static,
            max_cache_len: None,
            prefill_bucket: 128,
            compile: true,
            recompile_limit: 8,
            keep_logits: false,
        }
    }
}

/// What one generation produced.
pub struct GenerationOutput {
    /// The generated tokens (not the prompt), ending with an eos token if one was drawn.
    pub tokens: Vec<i64>,
    /// Each step's logits for the next token, `[vocab]` f32, when `keep_logits` was set.
    pub logits: Vec<Tensor>,
    /// After each token, the compiles of the prefill and decode functions so far, together
    /// (all zero when not compiled).
    pub compiles_per_token: Vec<u64>,
    /// Each token's modeled device time on this guest's core: the prefill for the first, one
    /// decode step for each other ([`device_time`](crate::device_time) around the step).
    pub device_time_per_token: Vec<Duration>,
}

/// Picks the next token from logits: greedy, or seeded sampling after temperature, top-k and
/// top-p. The generator is SplitMix64, so a seed gives the same tokens on every host (not
/// torch's generator: the same seed does not give torch's tokens).
pub struct Sampler {
    state: u64,
    config: GenerationConfig,
}

impl Sampler {
    /// A sampler for `config`, seeded with its `seed`.
    #[track_caller]
    pub fn new(config: &GenerationConfig) -> Result<Sampler> {
        let c = config;
        if c.do_sample && !(c.temperature > 0.0 && c.temperature.is_finite()) {
            return Err(invalid(format!(
                "temperature must be positive, not {}",
                c.temperature
            )));
        }
        if !(c.top_p > 0.0 && c.top_p <= 1.0) {
            return Err(invalid(format!("top_p must be in (0, 1], not {}", c.top_p)));
        }
        Ok(Sampler {
            state: c.seed,
            config: c.clone(),
        })
    }

    /// A uniform draw in `[0, 1)`.
    fn uniform(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The next token for `logits` (`[vocab]`).
    pub fn next_token(&mut self, logits: &[f32]) -> i64 {
        if !self.config.do_sample {
            return argmax(logits) as i64;
        }
        let mut scores: Vec<f64> = logits
            .iter()
            .map(|&x| x as f64 / self.config.temperature)
            .collect();
        let k = self.config.top_k.min(scores.len());
        if k > 0 {
            let mut sorted = scores.clone();
            sorted.sort_by(|a, b| b.total_cmp(a));
            let threshold = sorted[k - 1];
            scores
                .iter_mut()
                .filter(|s| **s < threshold)
                .for_each(|s| *s = f64::NEG_INFINITY);
        }
        if self.config.top_p < 1.0 {
            // Drop the least likely tokens whose probabilities add up to at most 1 - top_p,
            // always keeping the most likely one.
            let mut order: Vec<usize> = (0..scores.len()).collect();
            order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
            let probs = softmax(&order.iter().map(|&i| scores[i]).collect::<Vec<_>>());
            let mut cumulative = 0.0;
            for (rank, &i) in order.iter().enumerate().take(order.len() - 1) {
                cumulative += probs[rank];
                if cumulative <= 1.0 - self.config.top_p {
                    scores[i] = f64::NEG_INFINITY;
                }
            }
        }
        let probs = softmax(&scores);
        let u = self.uniform();
        let mut cumulative = 0.0;
        for (i, p) in probs.iter().enumerate() {
            cumulative += p;
            if u < cumulative {
                return i as i64;
            }
        }
        argmax(logits) as i64
    }
}

fn argmax(xs: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in xs.iter().enumerate() {
        if x > xs[best] || (xs[best].is_nan() && !x.is_nan()) {
            best = i;
        }
    }
    best
}

fn softmax(scores: &[f64]) -> Vec<f64> {
    let max = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let exps: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
    let total: f64 = exps.iter().sum();
    exps.into_iter().map(|e| e / total).collect()
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::Invalid, format!("generate: {message}"))
}

/// A 0-d i64 tensor.
#[track_caller]
fn index(value: i64) -> Result<Tensor> {
    scalar(value as f64, DType::I64)
}

/// Generation with one model and one [`GenerationConfig`], its compiled prefill and decode
/// steps kept across calls: prompts in one prefill bucket reuse one prefill program, and
/// with a static cache every decode step of every call reuses one decode program.
pub struct Generator<'m> {
    model: &'m LlamaForCausalLM,
    config: GenerationConfig,
    prefill: Option<Compiled<'m>>,
    decode: Option<Compiled<'m>>,
    /// The static cache's length, fixed by the first call unless the config gives it.
    cache_len: Option<i64>,
}

impl<'m> Generator<'m> {
    /// A generator for `model`; compiles nothing until the first call.
    #[track_caller]
    pub fn new(model: &'m LlamaForCausalLM, config: &GenerationConfig) -> Result<Generator<'m>> {
        Sampler::new(config)?;
        if config.prefill_bucket <= 0 {
            return Err(invalid(format!(
                "prefill_bucket must be positive, not {}",
                config.prefill_bucket
            )));
        }
        let (prefill, decode) = if config.compile {
            let kind = config.cache;
            let layers = model.model.layers.len();
            let mut names = vec![
                "input_ids".to_string(),
                "cache_position".to_string(),
                "last_index".to_string(),
            ];
            for layer in 0..layers {
                names.push(format!("past_key_values.{layer}.key"));
                names.push(format!("past_key_values.{layer}.value"));
            }
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let options = || {
                CompileOptions::new()
                    .recompile_limit(config.recompile_limit)
                    .input_names(&names)
            };
            let f = |name: &str| {
                compile_with(
                    &format!("{name} ({} cache)", kind.name()),
                    move |args: &[Tensor]| model.step(kind, args),
                    options(),
                )
            };
            (Some(f("prefill")?), Some(f("decode")?))
        } else {
            (None, None)
        };
        Ok(Generator {
            model,
            config: config.clone(),
            prefill,
            decode,
            cache_len: config.max_cache_len,
        })
    }

    /// The prefill function's compile statistics so far (`None` when not compiled).
    #[track_caller]
    pub fn prefill_stats(&self) -> Result<Option<CompileStats>> {
        self.prefill.as_ref().map(Compiled::stats).transpose()
    }

    /// The decode function's compile statistics so far (`None` when not compiled).
    #[track_caller]
    pub fn decode_stats(&self) -> Result<Option<CompileStats>> {
        self.decode.as_ref().map(Compiled::stats).transpose()
    }

    /// The compiles of both functions so far.
    #[track_caller]
    fn compiles(&self) -> Result<u64> {
        let count = |s: Option<CompileStats>| s.map_or(0, |s| s.compiles);
        Ok(count(self.prefill_stats()?) + count(self.decode_stats()?))
    }

    /// Runs one step, compiled or eagerly.
    #[track_caller]
    fn run(&self, decode: bool, args: &[&Tensor]) -> Result<Vec<Tensor>> {
        match if decode { &self.decode } else { &self.prefill } {
            Some(f) => f.call(args),
            None => {
                let owned: Vec<Tensor> =
                    args.iter().map(|t| t.try_clone()).collect::<Result<_>>()?;
                self.model.step(self.config.cache, &owned)
            }
        }
    }

    /// Generates up to `max_new_tokens` tokens after `prompt` (one sequence), under
    /// `no_grad`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] for an empty prompt, a token outside the vocabulary, or a static
    /// cache too short for the prompt and the new tokens.
    #[track_caller]
    pub fn generate(&mut self, prompt: &[i64]) -> Result<GenerationOutput> {
        no_grad(|| self.generate_inner(prompt))
    }

    #[track_caller]
    fn generate_inner(&mut self, prompt: &[i64]) -> Result<GenerationOutput> {
        let (model, config) = (self.model, self.config.clone());
        let c = &model.config;
        if prompt.is_empty() {
            return Err(invalid(
                "the prompt is empty: give at least one token".to_string(),
            ));
        }
        if let Some(bad) = prompt.iter().find(|&&t| t < 0 || t >= c.vocab_size) {
            return Err(invalid(format!(
                "prompt token {bad} is outside the vocabulary (0..{})",
                c.vocab_size
            )));
        }
        let mut sampler = Sampler::new(&config)?;
        let eos = config
            .eos_token_id
            .clone()
            .unwrap_or_else(|| c.eos_token_id.clone());
        let kind = config.cache;
        let layers = model.model.layers.len();
        let n = prompt.len() as i64;
        let bucket = config.prefill_bucket;
        let round_up = |x: i64| (x + bucket - 1) / bucket * bucket;
        let (mut cache, prefill_len) = match kind {
            CacheKind::Dynamic => (KvCache::dynamic(layers), n),
            CacheKind::Static => {
                let len = *self
                    .cache_len
                    .get_or_insert_with(|| round_up(n + config.max_new_tokens as i64));
                if n + config.max_new_tokens as i64 > len {
                    return Err(invalid(format!(
                        "the static cache holds {len} tokens, fewer than the prompt ({n}) plus max_new_tokens ({})",
                        config.max_new_tokens
                    )));
                }
                let dtype = model.model.embed_tokens.weight.dtype();
                let shape = [1, c.num_key_value_heads, len, c.head_dim];
                (
                    KvCache::new_static(layers, shape, dtype)?,
                    round_up(n).min(len),
                )
            }
        };

        let mut ids: Vec<i64> = prompt.to_vec();
        ids.resize(prefill_len as usize, 0);
        let mut input = from_slice(&ids, &[1, prefill_len])?;
        let mut position = 0;
        let mut last = n - 1;
        let mut out = GenerationOutput {
            tokens: Vec::new(),
            logits: Vec::new(),
            compiles_per_token: Vec::new(),
            device_time_per_token: Vec::new(),
        };
        for step in 0..config.max_new_tokens {
            let start = device_time();
            let (pos, last_t) = (index(position)?, index(last)?);
            let mut args: Vec<&Tensor> = vec![&input, &pos, &last_t];
            args.extend(cache.tensors());
            let mut results = self.run(step > 0, &args)?.into_iter();
            let logits = results
                .next()
                .ok_or_else(|| invalid("a step returned nothing".to_string()))?;
            cache = KvCache::from_tensors(kind, layers, &results.collect::<Vec<_>>())?;
            let token = sampler.next_token(&logits.to_vec::<f32>()?);
            out.tokens.push(token);
            out.device_time_per_token.push(device_time() - start);
            out.compiles_per_token.push(self.compiles()?);
            if config.keep_logits {
                out.logits.push(logits);
            }
            if eos.contains(&token) {
                break;
            }
            position = n + step as i64;
            last = 0;
            input = from_slice(&[token], &[1, 1])?;
        }
        Ok(out)
    }
}

impl LlamaForCausalLM {
    /// One generation step as a function of tensors: `[ids [1, seq], position, last, cache...]`
    /// to `[logits [vocab] f32 of the token at index last, cache...]`.
    #[track_caller]
    fn step(&self, kind: CacheKind, args: &[Tensor]) -> Result<Vec<Tensor>> {
        let [ids, position, last, cache @ ..] = args else {
            return Err(invalid(
                "a step takes ids, position, last and the cache".to_string(),
            ));
        };
        let layers = self.model.layers.len();
        let mut cache = KvCache::from_tensors(kind, layers, cache)?;
        let hidden = self.model.forward_hidden(ids, position, Some(&mut cache))?;
        let hidden =
            hidden.index_select_with(&last.unsqueeze(0)?, IndexSelectOptions::new().dim(1))?;
        let logits = in_dtype(&self.lm_head.forward(&hidden)?, DType::F32)?
            .reshape(&[self.config.vocab_size])?;
        let mut out = vec![logits];
        out.extend(cache.into_tensors());
        Ok(out)
    }

    /// Generates up to `config.max_new_tokens` tokens after `prompt` (one sequence), under
    /// `no_grad`, with a [`Generator`] made for this one call.
    ///
    /// # Errors
    ///
    /// As [`Generator::generate`], and [`ErrorKind::Invalid`] for a bad sampling setting.
    #[track_caller]
    pub fn generate(&self, prompt: &[i64], config: &GenerationConfig) -> Result<GenerationOutput> {
        Generator::new(self, config)?.generate(prompt)
    }
}
