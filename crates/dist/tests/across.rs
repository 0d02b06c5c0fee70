//! A world spread over processes ([`World::across`]), its processes simulated by threads
//! joined through channels: every collective, dtype and reduce op gives bit for bit what the
//! one-process world of the same size gives, and a rank that ends in one process fails the
//! meetings of the others at once, by name. The MPI transport carries the same messages
//! (tests/python/test_mpi.py runs it under mpirun).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use half::{bf16, f16};
use neuronlab_core::device::topology::Topology;
use neuronlab_core::runtime::RuntimeOptions;
use neuronlab_core::tensor::Buffer;
use neuronlab_core::{DType, Error, Runtime};
use neuronlab_dist::peers::{Message, Peers};
use neuronlab_dist::{ProcessGroup, RankComm, ReduceOp, World, WorldOptions};

/// A message on a channel: its sender and its bytes.
type Sent = (u32, Vec<u8>);

/// What a simulated process hands messages to, once the world listens.
type Deliver = Arc<dyn Fn(u32, Message) + Send + Sync>;

/// One simulated process's end of the channels. Messages are handed over as the MPI
/// transport does: by a listener thread that looks every 100 us, or by a waiting rank that
/// polls, one at a time.
struct Pipes {
    me: u32,
    to: Vec<Sender<Sent>>,
    from: Arc<Mutex<Receiver<Sent>>>,
    deliver: Arc<OnceLock<Deliver>>,
    /// How many messages each way handed over: by the listener, by a polling rank.
    handed: Arc<[AtomicUsize; 2]>,
}

/// Hands over one message from `from`, if one has come and no other thread is at it; None
/// once every sender is gone.
fn hand_over(from: &Mutex<Receiver<Sent>>, deliver: &OnceLock<Deliver>) -> Option<bool> {
    let Ok(from) = from.try_lock() else {
        return Some(false);
    };
    let Some(deliver) = deliver.get() else {
        return Some(false);
    };
    match from.try_recv() {
        Ok((sender, bytes)) => {
            deliver(sender, Message::decode(&bytes).expect("a whole message"));
            Some(true)
        }
        Err(TryRecvError::Empty) => Some(false),
        Err(TryRecvError::Disconnected) => None,
    }
}

impl Peers for Pipes {
    fn processes(&self) -> u32 {
        self.to.len() as u32
    }
    fn process(&self) -> u32 {
        self.me
    }
    fn send(&self, to: u32, bytes: Vec<u8>) -> Result<(), String> {
        self.to[to as usize]
            .send((self.me, bytes))
            .map_err(|_| "gone".into())
    }
    fn listen(&self, deliver: Deliver) {
        assert!(self.deliver.set(deliver).is_ok(), "one listener");
        let (from, deliver, handed) =
            (self.from.clone(), self.deliver.clone(), self.handed.clone());
        std::thread::spawn(move || loop {
            match hand_over(&from, &deliver) {
                Some(true) => drop(handed[0].fetch_add(1, Ordering::Relaxed)),
                Some(false) => std::thread::sleep(Duration::from_micros(100)),
                None => return,
            }
        });
    }
    fn poll(&self) -> bool {
        let took = hand_over(&self.from, &self.deliver) == Some(true);
        if took {
            self.handed[1].fetch_add(1, Ordering::Relaxed);
        }
        took
    }
}

fn pipes(processes: u32) -> Vec<Arc<Pipes>> {
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..processes).map(|_| channel()).unzip();
    receivers
        .into_iter()
        .enumerate()
        .map(|(me, rx)| {
            Arc::new(Pipes {
                me: me as u32,
                to: senders.clone(),
                from: Arc::new(Mutex::new(rx)),
                deliver: Arc::new(OnceLock::new()),
                handed: Arc::new([AtomicUsize::new(0), AtomicUsize::new(0)]),
            })
        })
        .collect()
}

fn runtime() -> Arc<Runtime> {
    Arc::new(Runtime::new(RuntimeOptions {
        topology: Topology::preset("trn2.48xlarge", Some(2)).unwrap(),
        host_limit: 4 << 30,
    }))
}

const TIMEOUT: Duration = Duration::from_secs(30);

/// Runs `f` on every rank of `processes` x `per_process` ranks, each simulated process with
/// its own runtime; the results in rank order, and how many messages the listeners and the
/// polling ranks handed over.
fn across_counted<R: Send>(
    processes: u32,
    per_process: u32,
    timeout: Duration,
    f: impl Fn(&mut RankComm) -> R + Sync,
) -> (Vec<R>, [usize; 2]) {
    let options = WorldOptions { timeout };
    let pipes = pipes(processes);
    let worlds: Vec<Arc<World>> = pipes
        .iter()
        .cloned()
        .map(|p| {
            let launcher = Arc::new(|_: u32, _: Vec<u8>| {});
            World::across(runtime(), per_process, p, options.clone(), launcher).unwrap()
        })
        .collect();
    std::thread::scope(|s| {
        let mut handles = Vec::new();
        for world in &worlds {
            for rank in world.local_ranks() {
                let (world, f) = (world.clone(), &f);
                handles.push(s.spawn(move || {
                    let mut comm = world.rank(rank);
                    let out = f(&mut comm);
                    world.depart(rank, "finished".into());
                    out
                }));
            }
        }
        let results = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let handed = |way: usize| {
            pipes
                .iter()
                .map(|p| p.handed[way].load(Ordering::Relaxed))
                .sum()
        };
        (results, [handed(0), handed(1)])
    })
}

/// [`across_counted`]'s results alone.
fn across<R: Send>(
    processes: u32,
    per_process: u32,
    timeout: Duration,
    f: impl Fn(&mut RankComm) -> R + Sync,
) -> Vec<R> {
    across_counted(processes, per_process, timeout, f).0
}

/// The same on one process.
fn together<R: Send>(n: u32, f: impl Fn(&mut RankComm) -> R + Sync) -> Vec<R> {
    let world = World::new(runtime(), n, WorldOptions { timeout: TIMEOUT }).unwrap();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|r| {
                let (world, f) = (world.clone(), &f);
                s.spawn(move || f(&mut world.rank(r)))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// Each rank's inputs: values that differ per rank and element, in `dtype`.
fn input(comm: &RankComm, dtype: DType, shape: &[usize]) -> neuronlab_core::Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| ((i * 7 + comm.rank() as usize * 13) % 23) as f64 / 3.0 - 3.1)
        .collect();
    let buffer = match dtype {
        DType::F32 => Buffer::F32(v.iter().map(|&x| x as f32).collect()),
        DType::Bf16 => Buffer::Bf16(v.iter().map(|&x| bf16::from_f64(x)).collect()),
        DType::F16 => Buffer::F16(v.iter().map(|&x| f16::from_f64(x)).collect()),
        DType::F64 => Buffer::F64(v),
        DType::I32 => Buffer::I32(v.iter().map(|&x| (x * 100.0) as i32).collect()),
        other => unreachable!("{other}"),
    };
    comm.runtime()
        .tensor_on(comm.core(), buffer, shape)
        .unwrap()
}

/// Every collective of the world group and of an unsorted subgroup, as bytes.
fn every_collective(comm: &mut RankComm, dtype: DType) -> Vec<Vec<u8>> {
    let world = comm.world().world_group();
    let n = comm.world_size();
    let sub = ProcessGroup::new(vec![n - 1, 0, 1], n, None).unwrap();
    let t = input(comm, dtype, &[4, 6]);
    let bytes = |t: neuronlab_core::Tensor| t.to_buffer().to_le_bytes();
    let mut out = Vec::new();
    let ops: &[ReduceOp] = match dtype {
        DType::I32 => &[ReduceOp::Sum, ReduceOp::Max],
        _ => &[
            ReduceOp::Sum,
            ReduceOp::Avg,
            ReduceOp::Product,
            ReduceOp::Min,
        ],
    };
    for &op in ops {
        out.push(bytes(comm.all_reduce(&world, &t, op).unwrap()));
        out.push(bytes(comm.reduce_scatter(&world, &t, op, 1).unwrap()));
    }
    out.push(bytes(comm.all_gather(&world, &t, 0).unwrap()));
    out.push(bytes(comm.all_to_all(&world, &t, 1, 0).unwrap()));
    out.push(bytes(comm.broadcast(&world, &t, n - 1).unwrap()));
    comm.barrier(&world).unwrap();
    if sub.rank_in_group(comm.rank()).is_ok() {
        out.push(bytes(comm.all_reduce(&sub, &t, ReduceOp::Sum).unwrap()));
    }
    out
}

#[test]
fn every_collective_matches_the_one_process_world_bit_for_bit() {
    for (processes, per_process) in [(2, 2), (4, 1), (2, 3)] {
        for dtype in [DType::F32, DType::Bf16, DType::F16, DType::F64, DType::I32] {
            let n = processes * per_process;
            let (spread, handed) = across_counted(processes, per_process, TIMEOUT, |c| {
                every_collective(c, dtype)
            });
            let one = together(n, |c| every_collective(c, dtype));
            assert_eq!(spread, one, "{processes} x {per_process} ranks, {dtype}");
            // Both ways of handing messages over took part, so the results hold for either.
            assert!(
                handed.iter().all(|&n| n > 0),
                "messages handed over by the listener and by polling ranks: {handed:?}"
            );
        }
    }
}

#[test]
fn a_rank_that_ends_in_another_process_fails_the_meeting_by_name() {
    let started = Instant::now();
    let results = across(2, 2, TIMEOUT, |comm| {
        let world = comm.world().world_group();
        let t = input(comm, DType::F32, &[2]);
        match comm.rank() {
            // Rank 3 ends without joining.
            3 => Ok(()),
            _ => comm.all_reduce(&world, &t, ReduceOp::Sum).map(|_| ()),
        }
    });
    for (rank, result) in results.iter().enumerate().take(3) {
        match result {
            Err(Error::Collective(m)) => assert!(
                m.contains("rank 3 finished without reaching it"),
                "rank {rank}: {m}"
            ),
            other => panic!("rank {rank}: {other:?}"),
        }
    }
    assert!(
        started.elapsed() < TIMEOUT / 2,
        "at once, not at the timeout"
    );
}

#[test]
fn a_missing_rank_in_another_process_times_out_naming_it() {
    let timeout = Duration::from_millis(300);
    let results = across(2, 1, timeout, |comm| {
        let world = comm.world().world_group();
        let t = input(comm, DType::F32, &[2]);
        if comm.rank() == 1 {
            // Never calls while the other waits, and ends only after its timeout.
            std::thread::sleep(timeout * 3);
            return Ok(());
        }
        comm.all_reduce(&world, &t, ReduceOp::Sum).map(|_| ())
    });
    match &results[0] {
        Err(Error::Collective(m)) => {
            assert!(
                m.contains("timed out") && m.contains("rank(s) 1 never arrived"),
                "{m}"
            )
        }
        other => panic!("{other:?}"),
    }
}
