//! InitProducerId refused for authorization, on the scripted rig: the transaction manager
//! goes back to UNINITIALIZED and `init_transactions` may be called again.

use super::*;

/// InitProducerId refused for authorization (docs/java-rules.md §5.2, §0 step 3, §9 item 18):
/// the error is abortable, and the sender's next loop (`Sender.shouldHandleAuthorizationError`)
/// fails the pending transactional requests and the batches and takes the manager back to
/// UNINITIALIZED (`TransactionManager.transitionToUninitialized`). The application may then call
/// `init_transactions` again (once the ACL is granted). Until it succeeds there is no producer
/// id, so no transaction may begin and no record may be sent: an abort must not lead to READY
/// without one.
#[test]
fn an_init_producer_id_authorization_failure_returns_to_uninitialized_and_init_can_be_retried() {
    let uninitialized = |operation| TransactionError::InvalidState {
        operation,
        state: "UNINITIALIZED",
    };
    for error in [
        code::TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        code::CLUSTER_AUTHORIZATION_FAILED,
    ] {
        let name = kacrab::testkit::internals::protocol::error_code::name(error);
        let mut rig = Rig::new(Duration::ZERO);
        rig.inject
            .insert(ApiKey::InitProducerId, VecDeque::from([error]));
        let handle = rig.engine.init_transactions().expect("init");
        let result = rig.wait(handle);
        assert!(
            matches!(&result, Err(TransactionError::Abortable(m)) if m.to_string().contains(&name)),
            "{name}: {result:?}"
        );
        assert_eq!(rig.state(), TransactionState::Uninitialized, "{name}");
        assert!(!rig.engine.identity().is_valid(), "{name}");
        assert_eq!(
            rig.engine.begin_transaction(),
            Err(uninitialized("begin_transaction")),
            "{name}"
        );
        assert_eq!(
            rig.engine.abort_transaction(),
            Err(uninitialized("abort_transaction")),
            "{name}"
        );
        assert_eq!(
            rig.engine.txn_check_send(),
            Err(uninitialized("send")),
            "{name}"
        );
        // Called again, it asks the coordinator again and succeeds.
        let handle = rig.engine.init_transactions().expect("init again");
        assert_eq!(rig.wait(handle), Ok(()), "{name}");
        assert_eq!(rig.count(ApiKey::InitProducerId), 2, "{name}");
        assert_eq!(rig.state(), TransactionState::Ready, "{name}");
        assert!(rig.engine.identity().is_valid(), "{name}");
        // A transaction then runs under the identity the second InitProducerId gave.
        rig.engine.begin_transaction().unwrap();
        let a = rig.send(0);
        let handle = rig.engine.commit_transaction().unwrap();
        assert_eq!(rig.wait(handle), Ok(()), "{name}");
        assert!(rig.result(a).unwrap().is_ok(), "{name}");
        assert_eq!(rig.add_partitions_requests(), vec![vec![0]], "{name}");
        let add = rig
            .log
            .iter()
            .find(|s| s.api == ApiKey::AddPartitionsToTxn)
            .expect("AddPartitionsToTxn");
        let add = AddPartitionsToTxnRequest::decode(&mut add.body.clone(), add.version).unwrap();
        let identity = rig.engine.identity();
        assert_eq!(
            (
                add.v3_and_below_producer_id.0,
                add.v3_and_below_producer_epoch
            ),
            (identity.producer_id, identity.epoch),
            "{name}"
        );
    }
}

/// Only the authorization failures go back to UNINITIALIZED: InitProducerId answered
/// TRANSACTION_ABORTABLE (docs/java-rules.md §5.2, abortable) leaves the manager abortable, with
/// the error in force, as for any other abortable error.
#[test]
fn an_init_producer_id_answered_transaction_abortable_stays_abortable() {
    let mut rig = Rig::new(Duration::ZERO);
    rig.inject.insert(
        ApiKey::InitProducerId,
        VecDeque::from([code::TRANSACTION_ABORTABLE]),
    );
    let handle = rig.engine.init_transactions().expect("init");
    let result = rig.wait(handle);
    assert!(
        matches!(&result, Err(TransactionError::Abortable(m)) if m.to_string().contains("TRANSACTION_ABORTABLE")),
        "{result:?}"
    );
    assert_eq!(rig.state(), TransactionState::AbortableError);
    assert_eq!(rig.count(ApiKey::InitProducerId), 1);
}
