//! Which compute process runs each task, and naming them in EXPLAIN
//! ANALYZE.
//!
//! `datafusion-distributed`'s coordinator asks its route handlers for one
//! worker URL per task of each stage, as it sends the stages out. Its
//! own handlers put a stage of one task in the coordinator and deal a
//! larger stage round the workers from a random one; they do not say
//! what they chose, and its EXPLAIN ANALYZE shows each task's metrics by
//! task number only. [`handler`] deals the tasks the same way (a rotating
//! start instead of a random one) and, when the query carries a
//! [`TaskRoutes`], writes each stage's choice down.
//!
//! The coordinator routes the stages bottom-up, in the order
//! `TreeNode::transform_up` meets their network boundaries (children
//! before parents, left to right). [`workers_section`] walks the executed
//! plan in that same order to pair each stage's number with the URLs
//! recorded for it, and appends a `Workers` section to EXPLAIN ANALYZE's
//! plan: `Stage 2: task 0 → 127.0.0.1:4001, task 1 → …`. Where the walk
//! and the record disagree (a plan routed some other way) the section
//! says so instead of guessing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use datafusion::physical_plan::ExecutionPlan;
use datafusion_distributed::{
    NetworkBoundaryExt, RouteTasksEvent, RouteTasksEventResponse, RouteTasksHandler, Stage,
};
use parking_lot::Mutex;
use url::Url;

use super::workers::Workers;

/// The workers chosen for each stage of one query, in routing order.
#[derive(Debug, Default)]
pub struct TaskRoutes(Mutex<Vec<Vec<Url>>>);

/// The route handler of a coordinator whose worker list is `workers`.
pub fn handler(workers: Arc<Workers>) -> impl RouteTasksHandler {
    let next = AtomicUsize::new(0);
    move |ev: RouteTasksEvent| Some(Ok(route(&workers, &next, &ev)))
}

/// One URL per task of `ev`'s stage: a single task in this process (the
/// coordinator), more round the live workers from a rotating start.
fn route(workers: &Workers, next: &AtomicUsize, ev: &RouteTasksEvent) -> RouteTasksEventResponse {
    let urls = match ev.task_count {
        1 => vec![workers.own_url()],
        n => {
            // `urls()` always holds this process.
            let live = workers.urls();
            let start = next.fetch_add(1, Ordering::Relaxed) % live.len();
            (0..n)
                .map(|i| live[(start + i) % live.len()].clone())
                .collect()
        }
    };
    if let Some(routes) = ev.task_ctx.session_config().get_extension::<TaskRoutes>() {
        routes.0.lock().push(urls.clone());
    }
    RouteTasksEventResponse::new(urls)
}

/// The stages under `plan` as the coordinator routes them: (number, task
/// count), children before parents.
fn stages_in_routing_order(plan: &Arc<dyn ExecutionPlan>, out: &mut Vec<(usize, usize)>) {
    for child in plan.children() {
        stages_in_routing_order(child, out);
    }
    if let Some(boundary) = plan.as_network_boundary() {
        if let Stage::Local(stage) = boundary.input_stage() {
            out.push((stage.num, stage.tasks));
        }
    }
}

/// The `Workers` section for an executed distributed plan (`executed`:
/// the `DistributedExec` under EXPLAIN ANALYZE) and what `routes`
/// recorded while it ran.
pub fn workers_section(executed: &Arc<dyn ExecutionPlan>, routes: &TaskRoutes) -> String {
    let mut stages = Vec::new();
    for child in executed.children() {
        stages_in_routing_order(child, &mut stages);
    }
    let routed = routes.0.lock();
    let agree = stages.len() == routed.len()
        && stages
            .iter()
            .zip(routed.iter())
            .all(|((_, tasks), urls)| *tasks == urls.len());
    let mut text = String::from("Workers (each task's compute process):\n");
    if !agree {
        text.push_str("  not recorded for this plan\n");
        return text;
    }
    let mut named: Vec<(usize, &Vec<Url>)> = stages
        .iter()
        .zip(routed.iter())
        .map(|((num, _), urls)| (*num, urls))
        .collect();
    named.sort_by_key(|(num, _)| *num);
    for (num, urls) in named {
        let tasks: Vec<String> = urls
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let host = u.host_str().unwrap_or_default();
                match u.port() {
                    Some(port) => format!("task {i} → {host}:{port}"),
                    None => format!("task {i} → {host}"),
                }
            })
            .collect();
        text.push_str(&format!("  Stage {num}: {}\n", tasks.join(", ")));
    }
    text
}

/// The answer stream of a `DistributedAnalyzeExec` (`analyze`) with the
/// workers section in its plan, written once the query under it ran.
pub fn naming_workers(
    stream: datafusion::execution::SendableRecordBatchStream,
    analyze: Arc<dyn ExecutionPlan>,
    routes: Arc<TaskRoutes>,
) -> datafusion::execution::SendableRecordBatchStream {
    use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
    use futures::StreamExt;
    let schema = stream.schema();
    let named = stream.map(move |batch| {
        let section = match analyze.children().first() {
            Some(executed) => workers_section(executed, &routes),
            None => return batch,
        };
        name_workers(batch?, &section).map_err(Into::into)
    });
    Box::pin(RecordBatchStreamAdapter::new(schema, named))
}

/// EXPLAIN ANALYZE's answer (`plan_type`, `plan`) with the workers
/// section appended to its "Plan with Metrics" row.
pub fn name_workers(
    batch: arrow::array::RecordBatch,
    section: &str,
) -> arrow::error::Result<arrow::array::RecordBatch> {
    use arrow::array::{Array, StringArray};
    let Some(plans) = batch.column(1).as_any().downcast_ref::<StringArray>() else {
        return Ok(batch);
    };
    let types = batch.column(0).as_any().downcast_ref::<StringArray>();
    let plans: StringArray = (0..plans.len())
        .map(|i| {
            let plan = plans.is_valid(i).then(|| plans.value(i).to_string())?;
            let first = types.is_some_and(|t| t.value(i) == "Plan with Metrics");
            Some(match first {
                true => format!("{}\n{section}", plan.trim_end()),
                false => plan,
            })
        })
        .collect();
    let mut columns = batch.columns().to_vec();
    columns[1] = Arc::new(plans);
    arrow::array::RecordBatch::try_new(batch.schema(), columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_is_appended_to_the_plan_with_metrics_only() {
        use arrow::array::{RecordBatch, StringArray};
        use arrow::datatypes::{DataType, Field, Schema};
        let schema = Arc::new(Schema::new(vec![
            Field::new("plan_type", DataType::Utf8, false),
            Field::new("plan", DataType::Utf8, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["Plan with Metrics", "Output Rows"])),
                Arc::new(StringArray::from(vec!["┌── DistributedExec\n", "4"])),
            ],
        )
        .unwrap();
        let named = name_workers(batch, "Workers (each task's compute process):\n").unwrap();
        let plans = named
            .column(1)
            .as_any()
            .downcast_ref::<StringArray>()
            .unwrap();
        assert_eq!(
            plans.value(0),
            "┌── DistributedExec\nWorkers (each task's compute process):\n"
        );
        assert_eq!(plans.value(1), "4");
    }

    #[test]
    fn a_stage_of_one_task_stays_in_the_coordinator_and_more_go_round_the_workers() {
        use datafusion::execution::TaskContext;
        use datafusion::physical_plan::empty::EmptyExec;
        let workers = Workers::new("127.0.0.1:1").unwrap();
        let next = AtomicUsize::new(0);
        let routes = Arc::new(TaskRoutes::default());
        let config = datafusion::prelude::SessionConfig::new().with_extension(routes.clone());
        let task_ctx = Arc::new(TaskContext::default().with_session_config(config));
        let plan: Arc<dyn ExecutionPlan> =
            Arc::new(EmptyExec::new(Arc::new(arrow::datatypes::Schema::empty())));
        for task_count in [1, 3] {
            let ev = RouteTasksEvent {
                task_ctx: task_ctx.clone(),
                plan: &plan,
                task_count,
            };
            let urls = route(&workers, &next, &ev).urls;
            assert_eq!(urls.len(), task_count);
            assert!(urls.iter().all(|u| u.as_str() == "http://127.0.0.1:1/"));
        }
        let routed = routes.0.lock();
        assert_eq!(routed.len(), 2);
        assert_eq!(routed[1].len(), 3);
    }
}
