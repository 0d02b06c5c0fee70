//! The Llama family of causal LMs as Hugging Face's `transformers` defines them:
//! [`LlamaConfig`] from `config.json`, [`DecoderLayer`], [`LlamaModel`] and
//! [`LlamaForCausalLM`], whose parameters carry the Hub's state-dict names.

use super::attention::{Attention, AttentionInputs};
use super::cache::KvCache;
use super::layers::{normal, ones_param, Embedding, Linear, Mlp, RmsNorm};
use super::param::Param;
use super::rotary::RotaryEmbedding;
use super::state_dict::StateDict;
use super::{join, Module};
use crate::dtype::DType;
use crate::error::{Error, ErrorKind, Result};
use crate::fs;
use crate::json::{self, Value};
use crate::ops::{arange_with, ArangeOptions};
use crate::tensor::Tensor;

/// How rotary frequencies are rescaled for long contexts (`rope_scaling` in config.json).
#[derive(Clone, Debug, PartialEq)]
pub enum RopeScaling {
    /// No scaling (`null`, or `rope_type: "default"`).
    None,
    /// `rope_type: "linear"`: every frequency divided by `factor`.
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// `rope_type: "llama3"`: low frequencies divided by `factor`, high ones kept, a smooth
    /// blend between.
    Llama3 {
        /// The divisor of the low frequencies.
        factor: f64,
        /// Wavelengths above `original_max_position_embeddings / low_freq_factor` are scaled.
        low_freq_factor: f64,
        /// Wavelengths below `original_max_position_embeddings / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context length the model was trained with.
        original_max_position_embeddings: f64,
    },
}

impl RopeScaling {
    /// Rescales the inverse frequencies in place, in f32 as `transformers` does.
    pub(crate) fn apply(&self, inv: &mut [f32]) {
        match *self {
            RopeScaling::None => {}
            RopeScaling::Linear { factor } => inv.iter_mut().for_each(|f| *f /= factor as f32),
            RopeScaling::Llama3 {
                factor,
                low_freq_factor,
                high_freq_factor,
                original_max_position_embeddings,
            } => {
                let (factor, low, high, old) = (
                    factor as f32,
                    low_freq_factor as f32,
                    high_freq_factor as f32,
                    original_max_position_embeddings as f32,
                );
                let low_wavelen = old / low;
                let high_wavelen = old / high;
                for f in inv.iter_mut() {
                    let wavelen = 2.0 * std::f32::consts::PI / *f;
                    let scaled = if wavelen > low_wavelen {
                        *f / factor
                    } else {
                        *f
                    };
                    let medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
                    *f = if medium {
                        let smooth = (old / wavelen - low) / (high - low);
                        (1.0 - smooth) * scaled / factor + smooth * scaled
                    } else {
                        scaled
                    };
                }
            }
        }
    }

    #[track_caller]
    fn from_json(v: Option<&Value>) -> Result<RopeScaling> {
        let Some(v) = v.filter(|v| !v.is_null()) else {
            return Ok(RopeScaling::None);
        };
        let kind = v
            .get("rope_type")
            .or_else(|| v.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        let num = |key: &str| {
            v.get(key)
                .and_then(Value::as_f64)
                .ok_or_else(|| config_error(&format!("rope_scaling.{key} must be a number")))
        };
        match kind {
            "default" => Ok(RopeScaling::None),
            "linear" => Ok(RopeScaling::Linear {
                factor: num("factor")?,
            }),
            "llama3" => Ok(RopeScaling::Llama3 {
                factor: num("factor")?,
                low_freq_factor: num("low_freq_factor")?,
                high_freq_factor: num("high_freq_factor")?,
                original_max_position_embeddings: num("original_max_position_embeddings")?,
            }),
            other => Err(config_error(&format!(
                "rope_scaling type `{other}` is not supported (supported: default, linear, llama3)"
            ))),
        }
    }
}

/// The next seed of a model's random init: one per parameter, in order.
fn next(seeds: &mut std::ops::RangeFrom<i64>) -> i64 {
    seeds.next().unwrap_or_default()
}

fn config_error(message: &str) -> Error {
    Error::new(ErrorKind::Invalid, format!("config.json: {message}"))
}

/// A Llama-family model's configuration, by `config.json`'s own field names.
#[derive(Clone, Debug, PartialEq)]
pub struct LlamaConfig {
    /// Tokens in the vocabulary.
    pub vocab_size: i64,
    /// Width of the residual stream.
    pub hidden_size: i64,
    /// Width of the MLP.
    pub intermediate_size: i64,
    /// Decoder layers.
    pub num_hidden_layers: i64,
    /// Query heads.
    pub num_attention_heads: i64,
    /// Key/value heads (grouped-query attention when fewer than the query heads).
    pub num_key_value_heads: i64,
    /// Width of one head (`hidden_size / num_attention_heads` unless given).
    pub head_dim: i64,
    /// The RMSNorm epsilon.
    pub rms_norm_eps: f64,
    /// The rotary base.
    pub rope_theta: f64,
    /// The rotary scaling.
    pub rope_scaling: RopeScaling,
    /// The longest context the model supports.
    pub max_position_embeddings: i64,
    /// True when `lm_head` shares `embed_tokens`' weight.
    pub tie_word_embeddings: bool,
    /// Biases on the attention projections.
    pub attention_bias: bool,
    /// Biases on the MLP projections.
    pub mlp_bias: bool,
    /// The std of the random init.
    pub initializer_range: f64,
    /// The token that starts a sequence, if given.
    pub bos_token_id: Option<i64>,
    /// The tokens that end a generation (one or a list in config.json).
    pub eos_token_id: Vec<i64>,
}

impl LlamaConfig {
    /// The config in a `config.json` document.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Invalid`] for a missing or mistyped required field, naming it, a
    /// `hidden_act` other than `silu`, or head counts that do not divide.
    #[track_caller]
    pub fn from_json(text: &str) -> Result<LlamaConfig> {
        let v = json::parse(text, "config.json")?;
        let int = |key: &str| -> Result<Option<i64>> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(x) => x
                    .as_i64()
                    .map(Some)
                    .ok_or_else(|| config_error(&format!("`{key}` must be an integer"))),
            }
        };
        let required = |key: &str| {
            int(key)?.ok_or_else(|| config_error(&format!("the required field `{key}` is missing")))
        };
        let float = |key: &str, default: f64| -> Result<f64> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(x) => x
                    .as_f64()
                    .ok_or_else(|| config_error(&format!("`{key}` must be a number"))),
            }
        };
        let flag = |key: &str, default: bool| -> Result<bool> {
            match v.get(key) {
                None | Some(Value::Null) => Ok(default),
                Some(x) => x
                    .as_bool()
                    .ok_or_else(|| config_error(&format!("`{key}` must be true or false"))),
            }
        };
        if let Some(act) = v.get("hidden_act").and_then(Value::as_str) {
            if act != "silu" {
                return Err(config_error(&format!(
                    "hidden_act `{act}` is not supported: Llama's MLP uses silu"
                )));
            }
        }
        let hidden_size = required("hidden_size")?;
        let num_attention_heads = required("num_attention_heads")?;
        let num_key_value_heads = int("num_key_value_heads")?.unwrap_or(num_attention_heads);
        let positive = [
            ("hidden_size", hidden_size),
            ("num_attention_heads", num_attention_heads),
            ("num_key_value_heads", num_key_value_heads),
        ];
        if let Some((key, _)) = positive.iter().find(|(_, n)| *n <= 0) {
            return Err(config_error(&format!("`{key}` must be positive")));
        }
        if num_attention_heads % num_key_value_heads != 0 {
            return Err(config_error(&format!(
                "num_attention_heads ({num_attention_heads}) must be a multiple of num_key_value_heads ({num_key_value_heads})"
            )));
        }
        let head_dim = match int("head_dim")? {
            Some(d) => d,
            None if hidden_size % num_attention_heads == 0 => hidden_size / num_attention_heads,
            None => {
                return Err(config_error(&format!(
                    "hidden_size ({hidden_size}) is not a multiple of num_attention_heads ({num_attention_heads}); give head_dim"
                )))
            }
        };
        if head_dim <= 0 || head_dim % 2 != 0 {
            return Err(config_error(&format!(
                "head_dim ({head_dim}) must be even for rotary embeddings"
            )));
        }
        let eos_token_id = match v.get("eos_token_id") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|x| {
                    x.as_i64()
                        .ok_or_else(|| config_error("`eos_token_id` must hold integers"))
                })
                .collect::<Result<_>>()?,
            Some(x) => vec![x
                .as_i64()
                .ok_or_else(|| config_error("`eos_token_id` must be an integer or a list"))?],
        };
        let config = LlamaConfig {
            vocab_size: required("vocab_size")?,
            hidden_size,
            intermediate_size: required("intermediate_size")?,
            num_hidden_layers: required("num_hidden_layers")?,
            num_attention_heads,
            num_key_value_heads,
            head_dim,
            rms_norm_eps: float("rms_norm_eps", 1e-6)?,
            rope_theta: float("rope_theta", 10000.0)?,
            rope_scaling: RopeScaling::from_json(v.get("rope_scaling"))?,
            max_position_embeddings: int("max_position_embeddings")?.unwrap_or(2048),
            tie_word_embeddings: flag("tie_word_embeddings", false)?,
            attention_bias: flag("attention_bias", false)?,
            mlp_bias: flag("mlp_bias", false)?,
            initializer_range: float("initializer_range", 0.02)?,
            bos_token_id: int("bos_token_id")?,
            eos_token_id,
        };
        let sizes = [
            ("vocab_size", config.vocab_size),
            ("intermediate_size", config.intermediate_size),
            ("num_hidden_layers", config.num_hidden_layers),
        ];
        if let Some((key, _)) = sizes.iter().find(|(_, n)| *n <= 0) {
            return Err(config_error(&format!("`{key}` must be positive")));
        }
        Ok(config)
    }

    /// Reads `folder/config.json`.
    #[track_caller]
    pub fn from_folder(folder: &str) -> Result<LlamaConfig> {
        LlamaConfig::from_json(&fs::read_to_string(&format!("{folder}/config.json"))?)
    }
}

/// One decoder layer: pre-norm attention and pre-norm MLP, each added to the residual.
pub struct DecoderLayer {
    /// The norm before attention.
    pub input_layernorm: RmsNorm,
    /// Causal self-attention.
    pub self_attn: Attention,
    /// The norm before the MLP.
    pub post_attention_layernorm: RmsNorm,
    /// The SwiGLU MLP.
    pub mlp: Mlp,
}

impl DecoderLayer {
    #[track_caller]
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        inputs: &AttentionInputs,
        layer: usize,
        cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        let h = self
            .self_attn
            .forward(&self.input_layernorm.forward(x)?, inputs, layer, cache)?;
        let x = x.add(&h)?;
        x.add(
            &self
                .mlp
                .forward(&self.post_attention_layernorm.forward(&x)?)?,
        )
    }
}

impl Module for DecoderLayer {
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Param)) {
        self.self_attn
            .visit_parameters(&join(prefix, "self_attn"), f);
        self.mlp.visit_parameters(&join(prefix, "mlp"), f);
        self.input_layernorm
            .visit_parameters(&join(prefix, "input_layernorm"), f);
        self.post_attention_layernorm
            .visit_parameters(&join(prefix, "post_attention_layernorm"), f);
    }
}

/// The decoder stack: embeddings, layers and the final norm (Hugging Face's `LlamaModel`).
pub struct LlamaModel {
    /// Token embeddings.
    pub embed_tokens: Embedding,
    /// The decoder layers.
    pub layers: Vec<DecoderLayer>,
    /// The final norm.
    pub norm: RmsNorm,
    /// The rotary embedding every layer shares.
    pub rotary_emb: RotaryEmbedding,
}

impl LlamaModel {
    /// The final hidden states `[batch, seq, hidden]` of `ids` (`[batch, seq]`, integer),
    /// the first at `position` (0-d i64), writing keys and values into `cache` when given.
    #[track_caller]
    pub fn forward_hidden(
        &self,
        ids: &Tensor,
        position: &Tensor,
        mut cache: Option<&mut KvCache>,
    ) -> Result<Tensor> {
        let shape = ids.shape();
        if shape.len() != 2 {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!("the model takes ids of shape [batch, seq], not {shape:?}"),
            ));
        }
        let seq = shape[1];
        let steps = arange_with(seq as f64, ArangeOptions::new().dtype(DType::I64))?;
        let query_positions = steps.add(position)?; // [seq]
        let key_len = cache.as_ref().map_or(seq, |c| c.key_len(seq));
        let key_positions = match &cache {
            // Without a cache the keys are the new tokens themselves.
            None => query_positions.try_clone()?,
            Some(_) => arange_with(key_len as f64, ArangeOptions::new().dtype(DType::I64))?,
        };
        let visible = key_positions
            .unsqueeze(0)?
            .le(&query_positions.unsqueeze(1)?)?; // [seq, keys]
        let mut x = self.embed_tokens.forward(ids)?;
        // FSDP2's forward prefetch: each layer's all-gathers are issued before the layer
        // ahead of it computes, so they run beside that compute instead of before their own.
        if let Some(first) = self.layers.first() {
            prefetch(first)?;
        }
        let positions = query_positions.unsqueeze(0)?.expand(&[shape[0], seq])?;
        let (cos, sin) = self.rotary_emb.cos_sin(&positions, x.dtype())?;
        let inputs = AttentionInputs {
            cos: &cos,
            sin: &sin,
            visible: &visible,
            position,
        };
        for (i, layer) in self.layers.iter().enumerate() {
            match self.layers.get(i + 1) {
                Some(next) => prefetch(next)?,
                None => prefetch(&self.norm)?,
            }
            x = layer.forward(&x, &inputs, i, cache.as_deref_mut())?;
        }
        self.norm.forward(&x)
    }
}

/// Starts the all-gathers of `module`'s sharded parameters ([`Param::prefetch`]).
#[track_caller]
fn prefetch(module: &dyn Module) -> Result<()> {
    let mut params = Vec::new();
    module.visit_parameters("", &mut |_, p| params.push(p));
    params.into_iter().try_for_each(Param::prefetch)
}

impl Module for LlamaModel {
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Param)) {
        self.embed_tokens
            .visit_parameters(&join(prefix, "embed_tokens"), f);
        for (i, layer) in self.layers.iter().enumerate() {
            layer.visit_parameters(&join(prefix, &format!("layers.{i}")), f);
        }
        self.norm.visit_parameters(&join(prefix, "norm"), f);
    }
}

/// A Llama-family causal LM: [`LlamaModel`] and the `lm_head` projection to logits.
pub struct LlamaForCausalLM {
    /// The configuration it was built from.
    pub config: LlamaConfig,
    /// The decoder stack.
    pub model: LlamaModel,
    /// `hidden → vocab`; its weight is `embed_tokens`' when the embeddings are tied.
    pub lm_head: Linear,
}

impl LlamaForCausalLM {
    /// A model of `config` with Hugging Face's random init (N(0, initializer_range²)
    /// weights, zero biases, unit norms) in `dtype`, every parameter a leaf that requires
    /// grad; `seed` makes it reproducible.
    #[track_caller]
    pub fn new(config: &LlamaConfig, dtype: DType, seed: i64) -> Result<LlamaForCausalLM> {
        let c = config;
        let mut seeds = seed..;
        let linear = |i, o, bias, seed| Linear::init(i, o, bias, c.initializer_range, seed, dtype);
        let mut layers = Vec::new();
        for _ in 0..c.num_hidden_layers {
            let (q, kv) = (
                c.num_attention_heads * c.head_dim,
                c.num_key_value_heads * c.head_dim,
            );
            let self_attn = Attention {
                q_proj: linear(c.hidden_size, q, c.attention_bias, next(&mut seeds))?,
                k_proj: linear(c.hidden_size, kv, c.attention_bias, next(&mut seeds))?,
                v_proj: linear(c.hidden_size, kv, c.attention_bias, next(&mut seeds))?,
                o_proj: linear(q, c.hidden_size, c.attention_bias, next(&mut seeds))?,
                num_heads: c.num_attention_heads,
                num_kv_heads: c.num_key_value_heads,
                head_dim: c.head_dim,
            };
            let mlp = Mlp {
                gate_proj: linear(
                    c.hidden_size,
                    c.intermediate_size,
                    c.mlp_bias,
                    next(&mut seeds),
                )?,
                up_proj: linear(
                    c.hidden_size,
                    c.intermediate_size,
                    c.mlp_bias,
                    next(&mut seeds),
                )?,
                down_proj: linear(
                    c.intermediate_size,
                    c.hidden_size,
                    c.mlp_bias,
                    next(&mut seeds),
                )?,
            };
            layers.push(DecoderLayer {
                input_layernorm: RmsNorm::new(ones_param(&[c.hidden_size], dtype)?, c.rms_norm_eps),
                self_attn,
                post_attention_layernorm: RmsNorm::new(
                    ones_param(&[c.hidden_size], dtype)?,
                    c.rms_norm_eps,
                ),
                mlp,
            });
        }
        let embed = normal(
            &[c.vocab_size, c.hidden_size],
            c.initializer_range,
            next(&mut seeds),
            dtype,
        )?;
        let lm_head = if c.tie_word_embeddings {
            Linear::new(embed.try_clone()?, None)
        } else {
            linear(c.hidden_size, c.vocab_size, false, next(&mut seeds))?
        };
        Ok(LlamaForCausalLM {
            config: config.clone(),
            model: LlamaModel {
                embed_tokens: Embedding::new(embed),
                layers,
                norm: RmsNorm::new(ones_param(&[c.hidden_size], dtype)?, c.rms_norm_eps),
                rotary_emb: RotaryEmbedding::new(c.head_dim, c.rope_theta, &c.rope_scaling)?,
            },
            lm_head,
        })
    }

    /// The model in a Hugging Face checkpoint folder: `config.json` and the weights
    /// (`model.safetensors`, or shards with `model.safetensors.index.json`), loaded onto this
    /// guest's core in their stored dtype, every parameter a leaf that requires grad.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Fs`] when the folder is not granted or a file is missing or malformed;
    /// [`ErrorKind::Invalid`] for a bad config, a missing tensor or one whose shape does not
    /// match the config (each named), or tensors the model does not use.
    #[track_caller]
    pub fn from_pretrained(folder: &str) -> Result<LlamaForCausalLM> {
        let config = LlamaConfig::from_folder(folder)?;
        let files = fs::list_dir(folder)?;
        let weights = if files.iter().any(|f| f == "model.safetensors.index.json") {
            format!("{folder}/model.safetensors.index.json")
        } else if files.iter().any(|f| f == "model.safetensors") {
            format!("{folder}/model.safetensors")
        } else {
            return Err(Error::new(
                ErrorKind::Fs,
                format!("`{folder}` has no model.safetensors or model.safetensors.index.json; it holds: {}", files.join(", ")),
            ));
        };
        let mut state = StateDict::load(&weights)?;
        let model = LlamaForCausalLM::from_state_dict(&config, &mut state)?;
        let unused = state.remaining();
        if !unused.is_empty() {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!(
                    "`{weights}` holds tensors a Llama model of this config does not have: {}",
                    unused.join(", ")
                ),
            ));
        }
        Ok(model)
    }

    /// The model of `config` with its parameters taken from `state` by their Hugging Face
    /// names, each marked as a leaf that requires grad. Buffers the model computes itself
    /// (`rotary_emb.inv_freq`) are dropped; other tensors stay in `state`.
    #[track_caller]
    pub fn from_state_dict(
        config: &LlamaConfig,
        state: &mut StateDict,
    ) -> Result<LlamaForCausalLM> {
        let c = config;
        state.discard_suffix("rotary_emb.inv_freq");
        let mut param = |name: &str, shape: &[i64]| state.take(name, shape)?.requires_grad();
        let (q, kv) = (
            c.num_attention_heads * c.head_dim,
            c.num_key_value_heads * c.head_dim,
        );
        let mut layers = Vec::new();
        for i in 0..c.num_hidden_layers {
            let p = format!("model.layers.{i}");
            let mut linear = |name: &str, i: i64, o: i64, bias: bool| -> Result<Linear> {
                let weight = param(&format!("{p}.{name}.weight"), &[o, i])?;
                let bias = if bias {
                    Some(param(&format!("{p}.{name}.bias"), &[o])?)
                } else {
                    None
                };
                Ok(Linear::new(weight, bias))
            };
            let self_attn = Attention {
                q_proj: linear("self_attn.q_proj", c.hidden_size, q, c.attention_bias)?,
                k_proj: linear("self_attn.k_proj", c.hidden_size, kv, c.attention_bias)?,
                v_proj: linear("self_attn.v_proj", c.hidden_size, kv, c.attention_bias)?,
                o_proj: linear("self_attn.o_proj", q, c.hidden_size, c.attention_bias)?,
                num_heads: c.num_attention_heads,
                num_kv_heads: c.num_key_value_heads,
                head_dim: c.head_dim,
            };
            let mlp = Mlp {
                gate_proj: linear(
                    "mlp.gate_proj",
                    c.hidden_size,
                    c.intermediate_size,
                    c.mlp_bias,
                )?,
                up_proj: linear(
                    "mlp.up_proj",
                    c.hidden_size,
                    c.intermediate_size,
                    c.mlp_bias,
                )?,
                down_proj: linear(
                    "mlp.down_proj",
                    c.intermediate_size,
                    c.hidden_size,
                    c.mlp_bias,
                )?,
            };
            let input_layernorm = RmsNorm::new(
                param(&format!("{p}.input_layernorm.weight"), &[c.hidden_size])?,
                c.rms_norm_eps,
            );
            let post = RmsNorm::new(
                param(
                    &format!("{p}.post_attention_layernorm.weight"),
                    &[c.hidden_size],
                )?,
                c.rms_norm_eps,
            );
            layers.push(DecoderLayer {
                input_layernorm,
                self_attn,
                post_attention_layernorm: post,
                mlp,
            });
        }
        let embed = param("model.embed_tokens.weight", &[c.vocab_size, c.hidden_size])?;
        let norm = RmsNorm::new(
            param("model.norm.weight", &[c.hidden_size])?,
            c.rms_norm_eps,
        );
        let lm_head = if c.tie_word_embeddings {
            // Tied: the head is the embedding, as transformers ties it (a stored copy is unused).
            state.take_optional("lm_head.weight", &[c.vocab_size, c.hidden_size])?;
            Linear::new(embed.try_clone()?, None)
        } else {
            Linear::new(
                param("lm_head.weight", &[c.vocab_size, c.hidden_size])?,
                None,
            )
        };
        Ok(LlamaForCausalLM {
            config: config.clone(),
            model: LlamaModel {
                embed_tokens: Embedding::new(embed),
                layers,
                norm,
                rotary_emb: RotaryEmbedding::new(c.head_dim, c.rope_theta, &c.rope_scaling)?,
            },
            lm_head,
        })
    }

    /// The logits `[batch, seq, vocab]` of `ids` (`[batch, seq]`, integer), from position 0
    /// with no cache: the training and scoring forward.
    #[track_caller]
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let start = super::scalar(0.0, DType::I64)?;
        self.lm_head
            .forward(&self.model.forward_hidden(ids, &start, None)?)
    }

    /// The logits `[batch, seq, vocab]` of `ids` whose first token is at `position` (0-d
    /// i64), reading and writing `cache`.
    #[track_caller]
    pub fn forward_with_cache(
        &self,
        ids: &Tensor,
        position: &Tensor,
        cache: &mut KvCache,
    ) -> Result<Tensor> {
        self.lm_head
            .forward(&self.model.forward_hidden(ids, position, Some(cache))?)
    }

    /// The parameters as a checkpoint holds them: `(name, tensor)` by Hugging Face's names,
    /// `lm_head.weight` omitted when tied (what `save_pretrained` writes).
    pub fn state_dict(&self) -> Vec<(String, &Tensor)> {
        self.named_parameters()
    }
}

impl Module for LlamaForCausalLM {
    fn visit_parameters<'a>(&'a self, prefix: &str, f: &mut dyn FnMut(String, &'a Param)) {
        self.model.visit_parameters(&join(prefix, "model"), f);
        if !self.config.tie_word_embeddings {
            self.lm_head.visit_parameters(&join(prefix, "lm_head"), f);
        }
    }
}
