//! What the other processes of a launch that spans processes send process 0, which shows
//! every rank's output and reports every rank's result: each line or tensor a rank prints
//! (as text; rich displays stay with rank 0, which shows them), and at the end the results of
//! the process's ranks and the events they published (so process 0's summary, `%events` and
//! trace cover every rank).

use neuronlab_core::events::{Event, SummaryBuilder};
use neuronlab_core::tensor::{format_tensor, FormatOptions};
use neuronlab_dist::peers::{Reader, Writer};

use crate::guest_error::Reported;
use crate::{GuestError, GuestErrorKind, GuestOutput};

/// One message for process 0.
#[derive(Debug)]
pub(crate) enum ForRankZero {
    /// Rank `rank` printed `text` on stdout, or on stderr.
    Output {
        rank: u32,
        stderr: bool,
        text: String,
    },
    /// The sending process's ranks have ended, thus.
    Done(Box<Finished>),
}

/// How a process's ranks ended.
#[derive(Debug)]
pub(crate) struct Finished {
    /// Each rank's result.
    pub(crate) results: Vec<(u32, Result<Vec<String>, GuestError>)>,
    /// The events the process's ranks published during the launch (those its recorder
    /// kept: all of them under `--trace`).
    pub(crate) events: Vec<Event>,
    /// Every event of the launch, counted: what process 0's summary adds for these ranks.
    pub(crate) counted: SummaryBuilder,
    /// The sender's bus clock when it sent them: what aligns their host times with process
    /// 0's clock.
    pub(crate) sent_at_us: f64,
}

impl ForRankZero {
    /// The message for `output` of `rank`, when it is text (or a tensor, as its text).
    pub(crate) fn output(rank: u32, output: GuestOutput) -> Option<ForRankZero> {
        let (stderr, text) = match output {
            GuestOutput::Stdout(text) => (false, text),
            GuestOutput::Stderr(text) => (true, text),
            GuestOutput::Tensor(t) => (false, format_tensor(&t, &FormatOptions::default()) + "\n"),
            _ => return None,
        };
        Some(ForRankZero::Output { rank, stderr, text })
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Writer(Vec::new());
        match self {
            ForRankZero::Output { rank, stderr, text } => {
                w.u8(0);
                w.u32(*rank);
                w.u8(u8::from(*stderr));
                w.str(text);
            }
            ForRankZero::Done(finished) => {
                let Finished {
                    results,
                    events,
                    counted,
                    sent_at_us,
                } = &**finished;
                w.u8(1);
                w.u64(sent_at_us.to_bits());
                w.bytes(&serde_json::to_vec(events).expect("events serialise"));
                w.bytes(&serde_json::to_vec(counted).expect("a summary serialises"));
                w.u64(results.len() as u64);
                for (rank, result) in results {
                    w.u32(*rank);
                    match result {
                        Ok(values) => {
                            w.u8(0);
                            w.u64(values.len() as u64);
                            values.iter().for_each(|v| w.str(v));
                        }
                        Err(e) => {
                            w.u8(1);
                            w.str(e.kind.name());
                            w.str(&e.message);
                            w.u64(e.backtrace.len() as u64);
                            e.backtrace.iter().for_each(|f| w.str(f));
                            match &e.reported {
                                None => w.u8(0),
                                Some(r) => {
                                    w.u8(1);
                                    w.str(&r.name);
                                    w.str(&r.message);
                                    w.option_str(r.location.as_deref());
                                }
                            }
                        }
                    }
                }
            }
        }
        w.0
    }

    pub(crate) fn decode(bytes: &[u8]) -> Result<ForRankZero, String> {
        let mut r = Reader(bytes);
        let strings = |r: &mut Reader| -> Result<Vec<String>, String> {
            let n = r.u64()?;
            (0..n).map(|_| r.str()).collect()
        };
        Ok(match r.u8()? {
            0 => ForRankZero::Output {
                rank: r.u32()?,
                stderr: r.u8()? != 0,
                text: r.str()?,
            },
            1 => {
                let sent_at_us = f64::from_bits(r.u64()?);
                let events: Vec<Event> = serde_json::from_slice(r.bytes()?)
                    .map_err(|e| format!("events that do not parse: {e}"))?;
                let counted: SummaryBuilder = serde_json::from_slice(r.bytes()?)
                    .map_err(|e| format!("a summary that does not parse: {e}"))?;
                let n = r.u64()?;
                let mut results = Vec::new();
                for _ in 0..n {
                    let rank = r.u32()?;
                    let result = match r.u8()? {
                        0 => Ok(strings(&mut r)?),
                        _ => {
                            let kind = r.str()?;
                            let kind = GuestErrorKind::from_name(&kind)
                                .ok_or_else(|| format!("unknown error kind {kind}"))?;
                            let message = r.str()?;
                            let backtrace = strings(&mut r)?;
                            let reported = match r.u8()? {
                                0 => None,
                                _ => Some(Box::new(Reported {
                                    name: r.str()?,
                                    message: r.str()?,
                                    location: r.option_str()?,
                                })),
                            };
                            Err(GuestError {
                                kind,
                                message,
                                backtrace,
                                reported,
                            })
                        }
                    };
                    results.push((rank, result));
                }
                ForRankZero::Done(Box::new(Finished {
                    results,
                    events,
                    counted,
                    sent_at_us,
                }))
            }
            kind => return Err(format!("unknown launcher message {kind}")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_and_output_survive_the_trip() {
        let error = GuestError {
            kind: GuestErrorKind::Trap,
            message: "the guest aborted".into(),
            backtrace: vec!["run".into()],
            reported: Some(Box::new(Reported {
                name: "Panic".into(),
                message: "boom".into(),
                location: Some("src/lib.rs:3:5".into()),
            })),
        };
        let bus = neuronlab_core::events::EventBus::new();
        bus.publish(
            neuronlab_core::device::CoreId(3),
            neuronlab_core::events::EventKind::Log {
                level: neuronlab_core::events::LogLevel::Info,
                target: "collectives".into(),
                message: "hello".into(),
            },
        );
        let mut counted = SummaryBuilder::default();
        bus.events().iter().for_each(|e| counted.add(e));
        let done = ForRankZero::Done(Box::new(Finished {
            results: vec![(2, Ok(vec!["6".into()])), (3, Err(error.clone()))],
            events: bus.events(),
            counted: counted.clone(),
            sent_at_us: 12.5,
        }));
        match ForRankZero::decode(&done.encode()).unwrap() {
            ForRankZero::Done(finished) => {
                let Finished {
                    results,
                    events,
                    counted: arrived,
                    sent_at_us,
                } = *finished;
                assert_eq!(sent_at_us, 12.5);
                assert_eq!(events, bus.events());
                assert_eq!(arrived, counted);
                assert_eq!(results[0].0, 2);
                assert_eq!(results[0].1.as_ref().unwrap(), &["6"]);
                let e = results[1].1.as_ref().unwrap_err();
                assert_eq!(e.to_string(), error.to_string());
            }
            other => panic!("{other:?}"),
        }
        let line = ForRankZero::output(5, GuestOutput::Stderr("x\n".into())).unwrap();
        match ForRankZero::decode(&line.encode()).unwrap() {
            ForRankZero::Output { rank, stderr, text } => {
                assert_eq!((rank, stderr, text.as_str()), (5, true, "x\n"))
            }
            other => panic!("{other:?}"),
        }
        assert!(ForRankZero::output(5, GuestOutput::ResultNext).is_none());
    }
}
