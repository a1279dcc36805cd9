use super::*;
use crate::protocol::api::NegotiatedVersions;
use TransactionState::*;

const ALL: [TransactionState; 8] = [
    Uninitialized,
    Initializing,
    Ready,
    InTransaction,
    CommittingTransaction,
    AbortingTransaction,
    AbortableError,
    FatalError,
];

#[test]
fn transition_table_matches_java_is_transition_valid() {
    let legal: &[(TransactionState, TransactionState)] = &[
        (Ready, Uninitialized),
        (AbortableError, Uninitialized),
        (Uninitialized, Initializing),
        (CommittingTransaction, Initializing),
        (AbortingTransaction, Initializing),
        (Initializing, Ready),
        (CommittingTransaction, Ready),
        (AbortingTransaction, Ready),
        (Ready, InTransaction),
        (InTransaction, CommittingTransaction),
        (InTransaction, AbortingTransaction),
        (AbortableError, AbortingTransaction),
        (InTransaction, AbortableError),
        (CommittingTransaction, AbortableError),
        (AbortableError, AbortableError),
        (Initializing, AbortableError),
    ];
    for from in ALL {
        for to in ALL {
            let expected = to == FatalError || legal.contains(&(from, to));
            assert_eq!(
                from.is_transition_valid(to),
                expected,
                "{} -> {}",
                from.name(),
                to.name()
            );
        }
    }
}

fn ready() -> TransactionManager {
    let mut tm = TransactionManager::new("tx".into(), 60_000);
    let handle = tm.init_transactions().unwrap();
    let request = tm.next_request(0).unwrap();
    assert_eq!(request.request, TxnRequest::InitProducerId { bump: false });
    tm.on_init_producer_id(&request, ProducerIdAndEpoch::new(7, 0));
    assert_eq!(tm.take_result(handle), Some(Ok(())));
    assert_eq!(tm.state(), Ready);
    tm
}

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

#[test]
fn illegal_calls_give_typed_errors_and_change_nothing() {
    let mut tm = TransactionManager::new("tx".into(), 60_000);
    assert_eq!(
        tm.begin_transaction(),
        Err(TransactionError::InvalidState {
            operation: "begin_transaction",
            state: "UNINITIALIZED"
        })
    );
    assert!(matches!(
        tm.commit_transaction(),
        Err(TransactionError::InvalidState { .. })
    ));
    assert_eq!(tm.state(), Uninitialized);
    let mut tm = ready();
    assert!(matches!(
        tm.commit_transaction(),
        Err(TransactionError::InvalidState { state: "READY", .. })
    ));
    assert!(matches!(
        tm.check_send(),
        Err(TransactionError::InvalidState {
            operation: "send",
            ..
        })
    ));
    assert!(matches!(
        tm.init_transactions(),
        Err(TransactionError::InvalidState { .. })
    ));
    tm.begin_transaction().unwrap();
    assert!(matches!(
        tm.begin_transaction(),
        Err(TransactionError::InvalidState { .. })
    ));
    assert_eq!(tm.state(), InTransaction);
}

#[test]
fn a_repeated_commit_returns_the_pending_handle_and_other_calls_are_refused() {
    let mut tm = ready();
    tm.begin_transaction().unwrap();
    let first = tm.commit_transaction().unwrap();
    assert_eq!(tm.commit_transaction().unwrap(), first);
    assert!(matches!(
        tm.abort_transaction(),
        Err(TransactionError::PendingOperation {
            pending: "commit_transaction",
            ..
        })
    ));
    assert!(matches!(
        tm.begin_transaction(),
        Err(TransactionError::PendingOperation { .. })
    ));
    assert_eq!(tm.take_result(first), None, "still running");
    // Nothing was added: EndTxn completes unsent once the flush is reported.
    assert!(tm.next_request(0).is_none());
    tm.all_flushed(1);
    assert!(tm.next_request(0).is_none());
    assert_eq!(tm.take_result(first), Some(Ok(())));
    assert_eq!(tm.state(), Ready);
    // The result was taken: a new commit is a new call.
    tm.begin_transaction().unwrap();
    assert_ne!(tm.commit_transaction().unwrap(), first);
}

#[test]
fn end_txn_waits_for_the_flush_of_its_round() {
    let mut tm = ready();
    tm.begin_transaction().unwrap();
    assert!(tm.add_partitions(&[tp(0)]).is_empty());
    let add = tm.next_request(0).unwrap();
    assert_eq!(add.request, TxnRequest::AddPartitions);
    assert!(tm.pending_partitions.contains(&tp(0)));
    tm.in_flight = Some(add);
    tm.in_flight = None;
    tm.on_partitions_added();
    assert!(tm.partitions_in_transaction.contains(&tp(0)));
    let handle = tm.commit_transaction().unwrap();
    assert!(tm.next_request(0).is_none(), "EndTxn waits for the flush");
    tm.all_flushed(1);
    let end = tm.next_request(0).unwrap();
    assert_eq!(
        end.request,
        TxnRequest::EndTxn {
            commit: true,
            v2: false
        }
    );
    tm.on_end_txn(&end);
    assert_eq!(tm.take_result(handle), Some(Ok(())));
    assert!(tm.partitions_in_transaction.is_empty());
    assert!(tm.actions.contains(&TxnAction::Ended));
}

#[test]
fn abortable_error_fails_commit_and_abort_bumps_the_epoch() {
    let mut tm = ready();
    tm.begin_transaction().unwrap();
    tm.add_partitions(&[tp(0)]);
    let add = tm.next_request(0).unwrap();
    let _ = add;
    tm.on_partitions_added();
    let err = ProduceError::TransactionAbortable(ErrorCause::other("test"));
    tm.produce_failed(&err, false, false);
    assert_eq!(tm.state(), AbortableError);
    assert!(tm.epoch_bump_required);
    assert!(matches!(
        tm.commit_transaction(),
        Err(TransactionError::Abortable(_))
    ));
    assert!(matches!(
        tm.check_send(),
        Err(TransactionError::Abortable(_))
    ));
    let handle = tm.abort_transaction().unwrap();
    assert_eq!(tm.state(), AbortingTransaction);
    tm.all_flushed(1);
    let end = tm.next_request(0).unwrap();
    assert_eq!(
        end.request,
        TxnRequest::EndTxn {
            commit: false,
            v2: false
        }
    );
    assert_eq!(end.op, None, "the bump decides the abort's result");
    tm.on_end_txn(&end);
    assert_eq!(tm.state(), Initializing);
    let bump = tm.next_request(0).unwrap();
    assert_eq!(bump.request, TxnRequest::InitProducerId { bump: true });
    tm.on_init_producer_id(&bump, ProducerIdAndEpoch::new(7, 1));
    assert_eq!(tm.state(), Ready);
    assert_eq!(tm.take_result(handle), Some(Ok(())));
    assert!(!tm.epoch_bump_required);
}

#[test]
fn requests_go_out_by_priority_then_fifo() {
    let mut tm = ready();
    tm.begin_transaction().unwrap();
    tm.enqueue(
        TxnRequest::EndTxn {
            commit: true,
            v2: false,
        },
        None,
        0,
    );
    tm.add_partitions(&[tp(1)]);
    tm.lookup_coordinator(CoordinatorType::Transaction, "tx".into());
    tm.lookup_coordinator(CoordinatorType::Transaction, "tx".into());
    let first = tm.next_request(0).unwrap();
    assert!(matches!(first.request, TxnRequest::FindCoordinator { .. }));
    let second = tm.next_request(0).unwrap();
    assert_eq!(second.request, TxnRequest::AddPartitions);
    assert!(tm
        .queued()
        .all(|q| !matches!(q.request, TxnRequest::FindCoordinator { .. })));
}

#[test]
fn a_fatal_error_fails_the_pending_call_and_every_queued_request() {
    let mut tm = ready();
    tm.begin_transaction().unwrap();
    let handle = tm.commit_transaction().unwrap();
    tm.transition_to_fatal(TransactionError::Fenced(ErrorCause::other("test")));
    assert_eq!(
        tm.take_result(handle),
        Some(Err(TransactionError::Fenced(ErrorCause::other("test"))))
    );
    tm.all_flushed(1);
    assert!(tm.next_request(0).is_none());
    assert_eq!(tm.queued().count(), 0);
    assert!(matches!(
        tm.abort_transaction(),
        Err(TransactionError::Fenced(_))
    ));
    assert!(matches!(
        tm.begin_transaction(),
        Err(TransactionError::Fenced(_))
    ));
}

#[test]
fn only_committing_and_aborting_are_completing() {
    for state in ALL {
        assert_eq!(
            state.is_completing(),
            matches!(state, CommittingTransaction | AbortingTransaction),
            "{}",
            state.name()
        );
    }
}

#[test]
fn a_batch_failing_while_the_commit_completes_asks_for_a_bump_only_if_it_needs_one() {
    // While the transaction is open, any failed batch makes the abort bump the epoch.
    let mut tm = ready();
    tm.begin_transaction().unwrap();
    tm.produce_failed(
        &ProduceError::TransactionAbortable(ErrorCause::other("t")),
        false,
        false,
    );
    assert_eq!(tm.state(), AbortableError);
    assert!(tm.epoch_bump_required);

    // Once the commit is completing (Java's `isCompleting`), only a batch that needs
    // the bump (unknown outcome) asks for one.
    let mut tm = ready();
    tm.begin_transaction().unwrap();
    tm.commit_transaction().unwrap();
    assert_eq!(tm.state(), CommittingTransaction);
    tm.produce_failed(
        &ProduceError::TransactionAbortable(ErrorCause::other("t")),
        false,
        false,
    );
    assert_eq!(tm.state(), AbortableError);
    assert!(!tm.epoch_bump_required);

    let mut tm = ready();
    tm.begin_transaction().unwrap();
    tm.commit_transaction().unwrap();
    tm.produce_failed(
        &ProduceError::TransactionAbortable(ErrorCause::other("t")),
        true,
        false,
    );
    assert!(tm.epoch_bump_required);
}

#[test]
fn leaving_an_error_state_by_aborting_clears_the_last_error() {
    let mut tm = ready();
    tm.begin_transaction().unwrap();
    tm.add_partitions(&[tp(0)]);
    let _add = tm.next_request(0).unwrap();
    tm.on_partitions_added();
    tm.produce_failed(
        &ProduceError::TransactionAbortable(ErrorCause::other("t")),
        false,
        false,
    );
    assert!(matches!(
        tm.last_error(),
        Some(TransactionError::Abortable(_))
    ));
    let handle = tm.abort_transaction().unwrap();
    tm.all_flushed(1);
    let end = tm.next_request(0).unwrap();
    tm.on_end_txn(&end);
    let bump = tm.next_request(0).unwrap();
    tm.on_init_producer_id(&bump, ProducerIdAndEpoch::new(7, 1));
    assert_eq!(tm.take_result(handle), Some(Ok(())));
    assert_eq!(tm.state(), Ready);
    assert_eq!(tm.last_error(), None);
}

#[test]
fn an_abortable_error_where_no_transaction_can_abort_makes_the_manager_fatal() {
    let mut tm = ready();
    tm.transition_to_abortable(TransactionError::Abortable(ErrorCause::other("late")));
    assert_eq!(tm.state(), FatalError);
    assert!(
        matches!(tm.last_error(), Some(TransactionError::Fatal(m)) if m.to_string().contains("abortable error in state READY")),
        "{:?}",
        tm.last_error()
    );
    // While aborting, an abortable error changes nothing: the abort goes on.
    let mut tm = ready();
    tm.begin_transaction().unwrap();
    tm.abort_transaction().unwrap();
    tm.transition_to_abortable(TransactionError::Abortable(ErrorCause::other("late")));
    assert_eq!(tm.state(), AbortingTransaction);
    assert_eq!(tm.last_error(), None);
}

/// An add that lost its answer may have started the transaction at the coordinator: the abort
/// then sends EndTxn although no add was answered. With nothing lost it completes unsent.
#[test]
fn an_abort_sends_end_txn_only_when_an_add_may_have_started_the_transaction() {
    let offsets = BTreeMap::from([(tp(9), OffsetAndMetadata::new(5))]);
    for lost in [None, Some("AddPartitionsToTxn"), Some("AddOffsetsToTxn")] {
        let mut tm = ready();
        tm.begin_transaction().unwrap();
        let offsets_call = match lost {
            Some("AddOffsetsToTxn") => Some(
                tm.send_offsets_to_transaction(offsets.clone(), GroupMetadata::new("g"))
                    .unwrap(),
            ),
            _ => {
                assert!(tm.add_partitions(&[tp(0)]).is_empty());
                None
            }
        };
        let add = tm.next_request(0).unwrap();
        if let Some(name) = lost {
            assert_eq!(add.request.name(), name);
            tm.on_answer_lost(&add);
        }
        tm.requeue(add, 0);
        tm.transition_to_abortable(TransactionError::Abortable(ErrorCause::other(
            "a batch failed",
        )));
        // In the error state the queued add is dropped unsent.
        assert!(tm.next_request(0).is_none());
        if let Some(call) = offsets_call {
            assert!(matches!(tm.take_result(call), Some(Err(_))));
        }
        assert!(!tm.transaction_started);
        let abort = tm.abort_transaction().unwrap();
        tm.all_flushed(1);
        match tm.next_request(0) {
            Some(end) => {
                assert!(lost.is_some(), "EndTxn sent with nothing lost");
                assert_eq!(
                    end.request,
                    TxnRequest::EndTxn {
                        commit: false,
                        v2: false
                    }
                );
            }
            None => {
                assert!(lost.is_none(), "{lost:?} lost, and EndTxn was skipped");
                assert_eq!(tm.take_result(abort), Some(Ok(())));
            }
        }
    }
}

/// What the sender does with InitProducerId's authorization failure: classify it, fail the
/// call, and in its next loop return to UNINITIALIZED (docs/java-rules.md §0 step 3, §5.2, §9 item
/// 18).
fn refuse_for_authorization(tm: &mut TransactionManager, request: &QueuedRequest, error: i16) {
    use crate::engine::txn_requests::{
        classify_init_producer_id, is_init_producer_id_authorization_failure, TxnOutcome,
    };
    assert!(is_init_producer_id_authorization_failure(error));
    let TxnOutcome::Abortable(err) = classify_init_producer_id(error) else {
        panic!("InitProducerId's authorization failure is abortable")
    };
    tm.fail_unauthorized(request, err);
    assert_eq!(tm.state(), AbortableError);
    assert!(tm.should_handle_authorization_error());
    tm.transition_to_uninitialized();
}

/// Java's Sender takes an InitProducerId authorization failure back to UNINITIALIZED
/// (`Sender.shouldHandleAuthorizationError`, `TransactionManager.transitionToUninitialized`): the
/// call fails with the error, `init_transactions` may be called again, and nothing else is
/// accepted, so no abort leads to READY without a producer id.
#[test]
fn an_init_producer_id_authorization_failure_returns_to_uninitialized_and_init_can_be_retried() {
    use crate::protocol::error_code::{self, code};
    for error in [
        code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        code::CLUSTER_AUTHORIZATION_FAILED,
    ] {
        let name = error_code::name(error);
        let mut tm = TransactionManager::new("tx".into(), 60_000);
        let handle = tm.init_transactions().unwrap();
        let request = tm.next_request(0).unwrap();
        refuse_for_authorization(&mut tm, &request, error);
        assert!(matches!(
            tm.take_result(handle),
            Some(Err(TransactionError::Abortable(m))) if m.to_string().contains(&name)
        ));
        assert_eq!(tm.state(), Uninitialized, "{name}");
        assert_eq!(tm.last_error(), None, "{name}");
        assert!(!tm.should_handle_authorization_error(), "{name}");
        assert!(tm.actions.contains(&TxnAction::Ended), "{name}");
        let refused = |operation| {
            Err(TransactionError::InvalidState {
                operation,
                state: "UNINITIALIZED",
            })
        };
        assert_eq!(
            tm.abort_transaction().map(|_| ()),
            refused("abort_transaction")
        );
        assert_eq!(tm.begin_transaction(), refused("begin_transaction"));
        assert_eq!(tm.check_send(), refused("send"));
        assert_eq!(tm.state(), Uninitialized, "{name}");
        let again = tm.init_transactions().expect("init_transactions again");
        let request = tm.next_request(0).unwrap();
        assert_eq!(request.request, TxnRequest::InitProducerId { bump: false });
        tm.on_init_producer_id(&request, ProducerIdAndEpoch::new(7, 0));
        assert_eq!(tm.take_result(again), Some(Ok(())));
        assert_eq!(tm.state(), Ready, "{name}");
        tm.begin_transaction().unwrap();
        tm.check_send().unwrap();
    }
}

/// The same failure on the epoch bump that ends an abort: the abort fails with the error and
/// the manager is UNINITIALIZED, not READY under the old epoch.
#[test]
fn an_authorization_failure_of_the_aborts_epoch_bump_fails_the_abort_and_returns_to_uninitialized()
{
    let mut tm = ready();
    tm.begin_transaction().unwrap();
    tm.add_partitions(&[tp(0)]);
    let _add = tm.next_request(0).unwrap();
    tm.on_partitions_added();
    tm.produce_failed(
        &ProduceError::TransactionAbortable(ErrorCause::other("test")),
        false,
        false,
    );
    let abort = tm.abort_transaction().unwrap();
    tm.all_flushed(1);
    let end = tm.next_request(0).unwrap();
    tm.on_end_txn(&end);
    let bump = tm.next_request(0).unwrap();
    assert_eq!(bump.request, TxnRequest::InitProducerId { bump: true });
    refuse_for_authorization(
        &mut tm,
        &bump,
        crate::protocol::error_code::code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    );
    assert!(matches!(
        tm.take_result(abort),
        Some(Err(TransactionError::Abortable(_)))
    ));
    assert_eq!(tm.state(), Uninitialized);
    assert!(!tm.epoch_bump_required);
    assert!(tm.begin_transaction().is_err());
    assert!(tm.init_transactions().is_ok());
}

/// Only InitProducerId's authorization failure leads back to UNINITIALIZED: any other
/// abortable error stays until the transaction is aborted.
#[test]
fn other_abortable_errors_do_not_return_to_uninitialized() {
    let mut tm = ready();
    tm.begin_transaction().unwrap();
    tm.produce_failed(
        &ProduceError::TransactionAbortable(ErrorCause::other("test")),
        false,
        false,
    );
    assert_eq!(tm.state(), AbortableError);
    assert!(!tm.should_handle_authorization_error());
    tm.transition_to_uninitialized();
    assert_eq!(tm.state(), AbortableError);
}

/// A 4.0 broker's answer: the V2 versions and `transaction.version` finalized at `level`.
fn tv2_answer(
    level: i16,
) -> (
    kafka_protocol::messages::ApiVersionsResponse,
    NegotiatedVersions,
) {
    use kafka_protocol::messages::api_versions_response::{ApiVersion, FinalizedFeatureKey};
    use kafka_protocol::protocol::StrBytes;
    let keys = [(0, 3, 12), (26, 0, 5), (28, 0, 5)]
        .into_iter()
        .map(|(k, min, max)| {
            ApiVersion::default()
                .with_api_key(k)
                .with_min_version(min)
                .with_max_version(max)
        })
        .collect();
    let response = kafka_protocol::messages::ApiVersionsResponse::default()
        .with_api_keys(keys)
        .with_finalized_features_epoch(i64::from(level))
        .with_finalized_features(vec![FinalizedFeatureKey::default()
            .with_name(StrBytes::from_static_str("transaction.version"))
            .with_max_version_level(level)
            .with_min_version_level(level)]);
    let negotiated = NegotiatedVersions::from_response(&response);
    (response, negotiated)
}

#[test]
fn tv2_is_latched_per_transaction_and_the_ending_one_keeps_its_protocol() {
    let mut tm = ready();
    assert!(!tm.is_transaction_v2());
    tm.begin_transaction().unwrap();
    // The cluster finalizes transaction.version=2 in the middle of a V1 transaction: nothing
    // changes until the transaction ends.
    let (response, negotiated) = tv2_answer(2);
    tm.on_api_versions(1, &response, &negotiated);
    assert!(!tm.is_transaction_v2());
    assert!(
        tm.add_partitions(&[tp(0)]).is_empty(),
        "a V1 add, not at once"
    );
    let handle = tm.commit_transaction().unwrap();
    // The commit chose V2 for the next transaction, and owes the epoch bump of the move.
    assert!(tm.is_transaction_v2());
    assert!(tm.epoch_bump_required);
    // A participant's late partition of the ending V1 transaction is still added by
    // AddPartitionsToTxn: it is this transaction's protocol that counts.
    assert!(tm.add_partitions(&[tp(1)]).is_empty());
    assert!(tm.new_partitions.contains(&tp(1)));
    let add = tm.next_request(0).unwrap();
    assert_eq!(add.request, TxnRequest::AddPartitions);
    tm.on_partitions_added();
    tm.all_flushed(1);
    let end = tm.next_request(0).unwrap();
    assert_eq!(
        end.request,
        TxnRequest::EndTxn {
            commit: true,
            v2: false
        }
    );
    assert_eq!(end.op, None, "the bump completes the call");
    tm.on_end_txn(&end);
    assert_eq!(tm.state(), Initializing);
    let bump = tm.next_request(0).unwrap();
    assert_eq!(bump.request, TxnRequest::InitProducerId { bump: true });
    assert!(tm.on_init_producer_id(&bump, ProducerIdAndEpoch::new(7, 1)));
    assert_eq!(tm.take_result(handle), Some(Ok(())));
    // The next transaction is V2: its partitions are in at once.
    tm.begin_transaction().unwrap();
    assert_eq!(tm.add_partitions(&[tp(2)]), vec![tp(2)]);
    assert!(tm.transaction_started);
    assert!(
        tm.next_request(0).is_none(),
        "no AddPartitionsToTxn under V2"
    );
}

#[test]
fn tv2_abortable_errors_owe_no_client_epoch_bump() {
    let mut tm = TransactionManager::new("tx".into(), 60_000);
    let (response, negotiated) = tv2_answer(2);
    tm.on_api_versions(1, &response, &negotiated);
    let handle = tm.init_transactions().unwrap();
    let request = tm.next_request(0).unwrap();
    assert!(tm.on_init_producer_id(&request, ProducerIdAndEpoch::new(7, 0)));
    assert_eq!(tm.take_result(handle), Some(Ok(())));
    assert!(tm.is_transaction_v2());
    tm.begin_transaction().unwrap();
    assert_eq!(tm.add_partitions(&[tp(0)]), vec![tp(0)]);
    // Even a batch of unknown outcome: the abort's EndTxn v5 brings the new epoch.
    tm.produce_failed(&ProduceError::TransactionAborted, true, false);
    assert_eq!(tm.state(), AbortableError);
    assert!(!tm.epoch_bump_required);
    // Without KIP-360 at the coordinator V2 can still recover (`canHandleAbortableError`).
    tm.coordinator_supports_bumping_epoch = false;
    assert!(tm.can_handle_abortable_error());
    tm.abort_transaction().unwrap();
    tm.all_flushed(1);
    let end = tm.next_request(0).unwrap();
    assert_eq!(
        end.request,
        TxnRequest::EndTxn {
            commit: false,
            v2: true
        }
    );
    assert!(
        tm.next_request(0).is_none(),
        "no InitProducerId after the EndTxn"
    );
}
