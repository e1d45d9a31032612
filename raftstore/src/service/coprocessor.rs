//! The Coprocessor service: one region's DAG, answered with Arrow chunks,
//! or several regions' under one DAG (a batch), each answered on its own.
//! Neither call fails for region or execution errors; those ride in each
//! region's response.
//!
//! A batch is compute's first attempt at a query's regions on this store
//! (TiFlash's batch coprocessor): one call, one DAG to decode and ship,
//! instead of one per region. Its regions share that DAG as it came
//! (`node/read_dag.rs`): it is encoded once to name their reads and
//! compiled once into the plan each region's executors are cloned from.
//! Its tasks run through the same
//! [`Node::coprocessor`] as single requests, at most [`batch_parallel`] at
//! a time (of the node's read pool), and each answer is streamed as soon
//! as it is ready, so a slow region does not hold the others' answers back
//! and at most that many finished pages wait for the stream to take them.
//! The batch's deadline is fixed when it arrives: a task that starts late
//! gets what is left of it, not a fresh one.
//!
//! Tasks that read only single rows (an index lookup's, a point get's) are
//! gathered into point groups of at most [`POINTS_PER_JOB`] rows, each
//! read in one pool job and answered together (`node/coprocessor.rs` has
//! why); every other task is a job of its own.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::StreamExt;
use quarry_coprocessor::codec::key::is_row_point;
use quarry_proto::coprocessor::coprocessor_server::Coprocessor;
use quarry_proto::coprocessor::{
    BatchCopRequest, BatchCopResponse, CopRequest, CopResponse, RegionTask,
};
use tonic::{Request, Response, Status};

use crate::engine::Engine;
use crate::node::{Node, ReadDag, POINTS_PER_JOB};

/// A batch's tasks running at once on a read pool of `threads`: at least
/// the pool's threads and 8, enough to keep the pool busy, few enough to
/// bound the pages waiting to be sent.
pub fn batch_parallel(threads: usize) -> usize {
    threads.max(8)
}

pub struct CoprocessorService<E: Engine> {
    node: Arc<Node<E>>,
}

impl<E: Engine> CoprocessorService<E> {
    pub fn new(node: Arc<Node<E>>) -> Self {
        CoprocessorService { node }
    }
}

#[tonic::async_trait]
impl<E: Engine> Coprocessor for CoprocessorService<E> {
    async fn coprocessor(&self, req: Request<CopRequest>) -> Result<Response<CopResponse>, Status> {
        Ok(Response::new(self.node.coprocessor(req.into_inner()).await))
    }

    type BatchCoprocessorStream = BoxStream<'static, Result<BatchCopResponse, Status>>;

    async fn batch_coprocessor(
        &self,
        req: Request<BatchCopRequest>,
    ) -> Result<Response<Self::BatchCoprocessorStream>, Status> {
        let BatchCopRequest {
            tasks,
            dag,
            encode_type,
            max_response_bytes,
            timeout_ms,
        } = req.into_inner();
        let node = self.node.clone();
        let dag = ReadDag::new(dag);
        let parallel = batch_parallel(node.read_pool_threads());
        let until = (timeout_ms > 0).then(|| Instant::now() + Duration::from_millis(timeout_ms));
        let answers = futures::stream::iter(jobs(tasks))
            .map(move |job| {
                let node = node.clone();
                // What is left of the batch's deadline (0: none).
                let timeout_ms = until.map_or(0, |u| {
                    (u.saturating_duration_since(Instant::now()).as_millis() as u64).max(1)
                });
                let (numbers, reqs): (Vec<u32>, Vec<CopRequest>) = job
                    .tasks
                    .into_iter()
                    .map(|(i, task)| {
                        let req = CopRequest {
                            context: task.context,
                            ranges: task.ranges,
                            dag: None,
                            encode_type,
                            max_response_bytes,
                            timeout_ms,
                        };
                        (i as u32, req)
                    })
                    .unzip();
                let dag = dag.clone();
                async move {
                    let responses: Vec<CopResponse> = if job.points {
                        node.coprocessor_points(reqs, dag).await
                    } else {
                        futures::future::join_all(
                            reqs.into_iter()
                                .map(|r| node.coprocessor_under(r, dag.clone())),
                        )
                        .await
                    };
                    futures::stream::iter(numbers.into_iter().zip(responses).map(
                        |(task, response)| {
                            Ok(BatchCopResponse {
                                task,
                                response: Some(response),
                            })
                        },
                    ))
                }
            })
            .buffer_unordered(parallel)
            .flatten();
        Ok(Response::new(answers.boxed()))
    }
}

/// Tasks of a batch read by one pool job, with their numbers in the batch.
struct Job {
    tasks: Vec<(usize, RegionTask)>,
    /// Single-row reads only, read together (`Node::coprocessor_points`).
    points: bool,
}

/// The batch's tasks as jobs: those that read single rows only in groups
/// of at most [`POINTS_PER_JOB`] rows, first; every other task alone.
fn jobs(tasks: Vec<RegionTask>) -> Vec<Job> {
    let reads_points = |t: &RegionTask| {
        !t.ranges.is_empty()
            && t.ranges.len() <= POINTS_PER_JOB
            && t.ranges.iter().all(|r| is_row_point(&r.start, &r.end))
    };
    let (points, others): (Vec<_>, Vec<_>) = tasks
        .into_iter()
        .enumerate()
        .partition(|(_, t)| reads_points(t));
    let mut jobs: Vec<Job> = Vec::new();
    let mut rows = 0;
    for (i, t) in points {
        let n = t.ranges.len();
        match jobs.last_mut() {
            Some(j) if rows + n <= POINTS_PER_JOB => {
                j.tasks.push((i, t));
                rows += n;
            }
            _ => {
                jobs.push(Job {
                    tasks: vec![(i, t)],
                    points: true,
                });
                rows = n;
            }
        }
    }
    jobs.extend(others.into_iter().map(|t| Job {
        tasks: vec![t],
        points: false,
    }));
    jobs
}

#[cfg(test)]
mod tests {
    use super::*;
    use quarry_coprocessor::codec::key::{record_key, row_keys_end, table_record_range};
    use quarry_proto::coprocessor::KeyRange;

    fn row(h: i64) -> KeyRange {
        let start = record_key(5, h);
        KeyRange {
            end: row_keys_end(&start),
            start,
        }
    }

    fn task(ranges: Vec<KeyRange>) -> RegionTask {
        RegionTask {
            context: None,
            ranges,
        }
    }

    #[test]
    fn single_row_tasks_are_grouped_up_to_the_row_limit_and_scans_run_alone() {
        let (start, end) = table_record_range(5);
        let half = POINTS_PER_JOB / 2 + 1;
        let tasks = vec![
            task((0..half as i64).map(row).collect()),
            task(vec![KeyRange { start, end }]),
            task(vec![row(1000)]),
            task((0..half as i64).map(|h| row(2000 + h)).collect()),
        ];
        let jobs = jobs(tasks);
        let shape: Vec<(Vec<usize>, bool)> = jobs
            .iter()
            .map(|j| (j.tasks.iter().map(|(i, _)| *i).collect(), j.points))
            .collect();
        assert_eq!(
            shape,
            vec![(vec![0, 2], true), (vec![3], true), (vec![1], false),]
        );
    }
}
