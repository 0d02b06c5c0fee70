//! generate: text generation with a Llama-family model from its Hugging Face checkpoint
//! folder, with a dynamic or a static KV cache, every step compiled.
//!
//! ```text
//! neuronlab run generate.wasm --dir MODEL [--dir-rw OUT] -- \
//!     --prompt-ids 1,2,3 | --prompt "text"  --max-new-tokens N  --cache static|dynamic \
//!     [--sample --temperature T --top-k K --top-p P --seed S] [--max-cache-len L] \
//!     [--model NAME] [--dump OUT/logits.safetensors]
//! ```
//!
//! The model is the granted folder holding `config.json` (or `--model NAME`). It prints
//! `tokens: ...` (the generated ids) and, when the folder has a `tokenizer.json`, `text: ...`
//! (their decoding; `--prompt` text is encoded with it, special tokens added) for each
//! prompt (the prompt flags may be repeated; the prompts share one generator, so prompts in
//! one 128-token bucket share a prefill program), then the compile counts of the prefill and
//! decode functions. With a dynamic cache every decode
//! step is a new shape, so it recompiles per token until the recompile limit; with a static
//! cache decode compiles once. `--dump` writes each step's next-token logits as f32 tensors
//! `step.0`, `step.1`, ... of shape `[vocab]` (`prompt.P.step.I` for several prompts).

use neuronlab::nn::{CacheKind, GenerationConfig, Generator, LlamaForCausalLM};
use neuronlab::prelude::*;
use neuronlab::println;
use neuronlab::tokenizer::Tokenizer;

/// What the command line asks for.
struct Request {
    model: Option<String>,
    prompt_ids: Vec<Vec<i64>>,
    prompts: Vec<String>,
    config: GenerationConfig,
    dump: Option<String>,
}

fn usage(message: &str) -> Error {
    Error::new(
        ErrorKind::Invalid,
        format!(
            "{message}\nusage: generate -- (--prompt-ids 1,2,3 | --prompt TEXT) [--max-new-tokens N] \
             [--cache static|dynamic] [--sample] [--temperature T] [--top-k K] [--top-p P] [--seed S] \
             [--max-cache-len L] [--eager] [--model NAME] [--dump OUT/logits.safetensors]"
        ),
    )
}

fn parse<T: std::str::FromStr>(flag: &str, value: Option<String>) -> Result<T> {
    let value = value.ok_or_else(|| usage(&format!("{flag} needs a value")))?;
    value
        .parse()
        .map_err(|_| usage(&format!("{flag}: `{value}` is not valid")))
}

fn request() -> Result<Request> {
    let mut r = Request {
        model: None,
        prompt_ids: Vec::new(),
        prompts: Vec::new(),
        config: GenerationConfig::new(16),
        dump: None,
    };
    let mut args = neuronlab::args().into_iter();
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--model" => r.model = Some(parse(&flag, args.next())?),
            "--prompt" => r.prompts.push(parse(&flag, args.next())?),
            "--prompt-ids" => {
                let text: String = parse(&flag, args.next())?;
                let ids = text
                    .split(',')
                    .map(|t| t.trim().parse::<i64>())
                    .collect::<std::result::Result<Vec<_>, _>>();
                r.prompt_ids.push(ids.map_err(|_| {
                    usage(&format!("--prompt-ids: `{text}` is not a list of integers"))
                })?);
            }
            "--max-new-tokens" => r.config.max_new_tokens = parse(&flag, args.next())?,
            "--cache" => {
                r.config.cache = match parse::<String>(&flag, args.next())?.as_str() {
                    "static" => CacheKind::Static,
                    "dynamic" => CacheKind::Dynamic,
                    other => {
                        return Err(usage(&format!(
                            "--cache: `{other}` is not static or dynamic"
                        )))
                    }
                }
            }
            "--sample" => r.config.do_sample = true,
            "--temperature" => r.config.temperature = parse(&flag, args.next())?,
            "--top-k" => r.config.top_k = parse(&flag, args.next())?,
            "--top-p" => r.config.top_p = parse(&flag, args.next())?,
            "--seed" => r.config.seed = parse(&flag, args.next())?,
            "--max-cache-len" => r.config.max_cache_len = Some(parse(&flag, args.next())?),
            "--eager" => r.config.compile = false,
            "--dump" => r.dump = Some(parse(&flag, args.next())?),
            other => return Err(usage(&format!("unknown argument `{other}`"))),
        }
    }
    if r.prompt_ids.is_empty() && r.prompts.is_empty() {
        return Err(usage(
            "give a prompt: --prompt-ids or --prompt (either may be repeated)",
        ));
    }
    r.config.keep_logits = r.dump.is_some();
    Ok(r)
}

/// The granted folder holding `config.json`, or the one `--model` names.
fn model_folder(named: Option<String>) -> Result<String> {
    if let Some(name) = named {
        return Ok(name);
    }
    let grants = fs::list_dir("")?;
    for grant in &grants {
        let name = grant.trim_end_matches('/');
        if fs::list_dir(name)?.iter().any(|f| f == "config.json") {
            return Ok(name.to_string());
        }
    }
    Err(Error::new(
        ErrorKind::Fs,
        format!(
            "no granted folder holds a config.json (granted: {}); grant the model folder with --dir MODEL",
            if grants.is_empty() { "none".to_string() } else { grants.join(", ") }
        ),
    ))
}

fn micros(d: &std::time::Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn run() -> Result<()> {
    let r = request()?;
    let folder = model_folder(r.model)?;
    let model = LlamaForCausalLM::from_pretrained(&folder)?;
    let c = &model.config;
    println!(
        "model: {folder} ({} layers, hidden {}, heads {}/{} kv, vocab {}, {} parameters, {})",
        c.num_hidden_layers,
        c.hidden_size,
        c.num_attention_heads,
        c.num_key_value_heads,
        c.vocab_size,
        neuronlab::nn::Module::num_parameters(&model),
        model.model.embed_tokens.weight.dtype()
    );
    let tokenizer = if fs::list_dir(&folder)?.iter().any(|f| f == "tokenizer.json") {
        Some(Tokenizer::from_file(&format!("{folder}/tokenizer.json"))?)
    } else {
        None
    };
    let mut prompts = r.prompt_ids;
    for text in &r.prompts {
        let tok = tokenizer.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::Invalid,
                format!("--prompt needs a tokenizer, and `{folder}` has no tokenizer.json; give --prompt-ids"),
            )
        })?;
        let ids = tok.encode(text, true)?;
        let shown: Vec<String> = ids.iter().map(|t| t.to_string()).collect();
        println!("prompt ids: {}", shown.join(","));
        prompts.push(ids);
    }
    let mut config = r.config;
    let bucket = config.prefill_bucket.max(1);
    if config.max_cache_len.is_none() && config.cache == CacheKind::Static {
        // One static cache length for every prompt, so decode compiles once for all of them.
        let longest = prompts.iter().map(Vec::len).max().unwrap_or(0) as i64;
        let need = longest + config.max_new_tokens as i64;
        config.max_cache_len = Some((need + bucket - 1) / bucket * bucket);
    }
    let mut generator = Generator::new(&model, &config)?;
    let mut dumped: Vec<(String, Tensor)> = Vec::new();
    for (p, prompt) in prompts.iter().enumerate() {
        let out = generator.generate(prompt)?;
        let ids: Vec<String> = out.tokens.iter().map(|t| t.to_string()).collect();
        println!("tokens: {}", ids.join(","));
        if let Some(tok) = &tokenizer {
            println!("text: {}", tok.decode(&out.tokens, true)?);
        }
        let times = &out.device_time_per_token;
        let decode = &times[1.min(times.len())..];
        let mean = decode
            .iter()
            .sum::<std::time::Duration>()
            .checked_div(decode.len() as u32);
        println!(
            "modeled time per token: prefill {:.1} us, decode {} over {} steps",
            times.first().map_or(0.0, micros),
            mean.map_or("-".to_string(), |m| format!("{:.1} us", micros(&m))),
            decode.len()
        );
        for (i, logits) in out.logits.into_iter().enumerate() {
            let name = if prompts.len() == 1 {
                format!("step.{i}")
            } else {
                format!("prompt.{p}.step.{i}")
            };
            dumped.push((name, logits));
        }
    }
    let cache = config.cache.name();
    for (name, stats) in [
        ("prefill", generator.prefill_stats()?),
        ("decode", generator.decode_stats()?),
    ] {
        if let Some(s) = stats {
            println!(
                "{name} ({cache} cache): {} calls, {} compile(s), {} cache hits, {} eager calls",
                s.calls, s.compiles, s.cache_hits, s.eager_calls
            );
        }
    }
    if let Some(path) = r.dump {
        let tensors: Vec<(&str, &Tensor)> = dumped.iter().map(|(n, t)| (n.as_str(), t)).collect();
        checkpoint::save(&path, &tensors, &[("format", "pt")])?;
        println!("wrote {} steps of logits to {path}", tensors.len());
    }
    Ok(())
}

neuronlab::main!(run);
