//! Continuing and branching: the seed's test list (reply, fork, chain,
//! dynamic tool sets, schema drift), each in its async and its blocking
//! form, plus byte-identical requests across entry points, forks of forks,
//! reply after a chain, failures inside tool loops, and persistence.

use crate::support::*;
use skein::core::{Annotation, Attachment, CacheHint, Part, ToolResult};
use skein::engine::EngineError;
use skein::store::{Origin, RunStatus};
use skein::{
    CallDecision, ChainStatus, Conversation, Error, Landed, Message, Role, Store, TurnInput,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path().join("skein.db")).unwrap();
    (dir, store)
}

fn names(tools: &[skein::ToolSpec]) -> Vec<&str> {
    tools.iter().map(|tool| tool.name.as_str()).collect()
}

both_forms!(reply_extends_the_thread_through_the_responses_head, {
    let fixture = Fixture::new();
    let first = send!(fixture.model().prompt("hello")).unwrap();
    let second = send!(first.reply("again")).unwrap();
    assert_eq!(second.text(), "you said: again");
    // The reply's user message hangs off the first response's node.
    let user = second.thread().parent();
    assert_eq!(user.parent().head_id(), Some(first.head()));
    assert_eq!(second.conversation().id(), first.conversation().id());
    assert_eq!(second.conversation().head(), Some(second.head()));
    assert_eq!(
        transcript(second.thread()),
        [
            "User: hello",
            "Assistant: you said: hello",
            "User: again",
            "Assistant: you said: again"
        ]
    );
});

both_forms!(reply_tools_override_the_conversations_for_one_turn_only, {
    let fixture = Fixture::new();
    let conversation = fixture
        .model()
        .conversation()
        .tools([fixture.tool("a")])
        .build();
    let first = send!(conversation.prompt("hi")).unwrap();
    assert_eq!(names(first.tools()), ["a"]);
    let overridden = send!(first.reply("hi").tools([fixture.tool("b")])).unwrap();
    assert_eq!(names(overridden.tools()), ["b"]);
    assert_eq!(names(&fixture.main.last().tools), ["b"]);
    let none = send!(overridden.reply("hi").tools([])).unwrap();
    assert!(none.tools().is_empty());
    assert!(fixture.main.last().tools.is_empty());
    let back = send!(none.reply("hi")).unwrap();
    assert_eq!(names(back.tools()), ["a"]);
});

both_forms!(reply_model_routes_to_that_model_and_keeps_the_history, {
    let fixture = Fixture::new();
    let first = send!(fixture.model().prompt("hello")).unwrap();
    let other = fixture.other_model();
    let routed = send!(first.reply("to the other").model(&other)).unwrap();
    assert_eq!(fixture.other.count(), 1);
    let request = fixture.other.last();
    assert_eq!(request.model, "other-model");
    assert_eq!(
        transcript(&request.thread),
        [
            "User: hello",
            "Assistant: you said: hello",
            "User: to the other"
        ]
    );
    assert_eq!(routed.output().prepared.profile, "other");
    // The conversation's own model stays the default.
    send!(routed.reply("back")).unwrap();
    assert_eq!(fixture.main.count(), 2);
    assert_eq!(fixture.other.count(), 1);
});

both_forms!(
    reply_on_a_response_without_a_conversation_makes_an_ad_hoc_one,
    {
        let fixture = Fixture::new();
        let response = send!(fixture.model().prompt("alone")).unwrap();
        assert!(response.conversation().store().is_none());
        assert!(response.conversation().name().is_none());
        let reply = send!(response.reply("more")).unwrap();
        assert_eq!(reply.text(), "you said: more");
        assert_eq!(reply.conversation().id(), response.conversation().id());
    }
);

both_forms!(
    replying_to_an_earlier_response_branches_instead_of_rewinding,
    {
        let fixture = Fixture::new();
        let (_dir, store) = store();
        let conversation = fixture.model().conversation().store(&store).build();
        let first = send!(conversation.prompt("one")).unwrap();
        let second = send!(first.reply("two")).unwrap();
        let branch = send!(first.reply("other two")).unwrap();
        assert_ne!(branch.conversation().id(), conversation.id());
        assert_eq!(conversation.head(), Some(second.head()));
        let stored = store.conversation(&conversation.id()).unwrap();
        assert_eq!(stored.head, Some(second.head()));
        let stored_branch = store.conversation(&branch.conversation().id()).unwrap();
        assert_eq!(stored_branch.head, Some(branch.head()));
        assert_eq!(
            stored_branch.origin.and_then(|origin| origin.node),
            Some(first.head())
        );
    }
);

both_forms!(
    fork_creates_a_conversation_row_pointing_at_the_right_head,
    {
        let fixture = Fixture::new();
        let (_dir, store) = store();
        let conversation = fixture
            .model()
            .conversation()
            .name("main line")
            .store(&store)
            .build();
        let first = send!(conversation.prompt("one")).unwrap();
        send!(first.reply("two")).unwrap();
        let fork = create!(first.fork().name("side")).unwrap();
        let row = store.conversation(&fork.id()).unwrap();
        assert_eq!(row.name.as_deref(), Some("side"));
        assert_eq!(row.head, Some(first.head()));
        assert_eq!(
            row.origin,
            Some(Origin {
                node: Some(first.head()),
                conversation: Some(conversation.id().clone()),
                rerun: None,
            })
        );
        // An independent future: the fork's turn leaves the original alone.
        let original_head = conversation.head();
        send!(fork.prompt("three")).unwrap();
        assert_eq!(conversation.head(), original_head);
    }
);

both_forms!(
    fork_with_a_prompt_returns_a_response_in_the_new_conversation,
    {
        let fixture = Fixture::new();
        let first = send!(fixture.model().prompt("one")).unwrap();
        let other = fixture.other_model();
        let forked = send!(first.fork().name("branch").model(&other).prompt("two")).unwrap();
        assert_ne!(forked.conversation().id(), first.conversation().id());
        assert_eq!(forked.conversation().name().as_deref(), Some("branch"));
        assert_eq!(forked.conversation().model().name(), "other");
        assert_eq!(
            forked.thread().parent().parent().head_id(),
            Some(first.head())
        );
        assert_eq!(
            forked
                .conversation()
                .origin()
                .and_then(|origin| origin.node),
            Some(first.head())
        );
    }
);

both_forms!(
    fork_on_an_unlogged_response_works_and_logging_stores_the_prefix_once,
    {
        let fixture = Fixture::new();
        let (_dir, store) = store();
        let first = send!(fixture.model().prompt("one")).unwrap();
        let second = send!(first.reply("two")).unwrap();
        let forked = send!(first.fork().prompt("branch")).unwrap();
        assert_eq!(store.list_conversations(10).unwrap().len(), 0);

        let main_id = log!(second, &store).unwrap();
        assert_eq!(main_id, second.conversation().id());
        let nodes = count(&store, "nodes");
        assert_eq!(nodes, 4);
        assert_eq!(count(&store, "runs"), 2);

        log!(forked, &store).unwrap();
        // Only the fork's own user message and reply are new.
        assert_eq!(count(&store, "nodes"), nodes + 2);
        assert_eq!(store.list_conversations(10).unwrap().len(), 2);
        let fork_row = store.conversation(&forked.conversation().id()).unwrap();
        assert_eq!(fork_row.head, Some(forked.head()));
        assert_eq!(
            fork_row.origin.and_then(|origin| origin.node),
            Some(first.head())
        );
        // Logging again changes nothing.
        log!(second, &store).unwrap();
        assert_eq!(count(&store, "nodes"), nodes + 2);
        assert_eq!(count(&store, "runs"), 3);
        assert!(store.verify().unwrap().is_ok());
    }
);

both_forms!(model_chain_resolves_tools_and_returns_a_chain_response, {
    let fixture = Fixture::new();
    let chain = send!(fixture.model().chain("please add", [fixture.tool("add")])).unwrap();
    assert_eq!(chain.status(), ChainStatus::Completed);
    assert_eq!(chain.responses().len(), 2);
    assert_eq!(chain.text(), "done: 5");
    assert_eq!(chain.responses()[0].tool_calls().count(), 1);
    for response in chain.responses() {
        assert_eq!(names(response.tools()), ["add"]);
    }
});

both_forms!(model_chain_without_tools_is_a_single_prompt, {
    let fixture = Fixture::new();
    let chain = send!(fixture.model().chain("hello", [])).unwrap();
    assert_eq!(chain.responses().len(), 1);
    assert_eq!(chain.status(), ChainStatus::Completed);
    let prompt = send!(fixture.model().prompt("hello")).unwrap();
    assert_eq!(chain.text(), prompt.text());
    assert_eq!(chain.last().head(), prompt.head());
    let requests = fixture.main.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].thread.head_id(), requests[1].thread.head_id());
    assert_eq!(requests[0].tools, requests[1].tools);
    assert_eq!(requests[0].options, requests[1].options);
});

both_forms!(tool_sets_change_per_call_and_history_keeps_earlier_pairs, {
    let fixture = Fixture::new();
    let conversation = fixture
        .model()
        .conversation()
        .tools([fixture.tool("a"), fixture.tool("b")])
        .build();
    let first = send!(conversation.chain("use a")).unwrap();
    assert_eq!(first.text(), "done: a(1)");
    let second = send!(
        first
            .reply("use b")
            .tools([fixture.tool("b"), fixture.tool("c")])
            .chain()
    )
    .unwrap();
    assert_eq!(second.text(), "done: b(2)");
    assert_eq!(names(second.last().tools()), ["b", "c"]);
    // The last request still carries the call to `a` and its result,
    // though `a` is no longer offered.
    let request = fixture.main.last();
    let calls: Vec<_> = request
        .thread
        .messages()
        .iter()
        .flat_map(|message| {
            message
                .tool_calls()
                .map(|call| call.name.clone())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(calls, ["a", "b"]);
    let results: Vec<_> = request
        .thread
        .messages()
        .iter()
        .flat_map(|message| {
            message
                .tool_results_iter()
                .map(|result| result.content.clone())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(results, ["a(1)", "b(2)"]);
    assert_eq!(names(&request.tools), ["b", "c"]);
});

both_forms!(schema_drift_warns_and_a_changed_description_does_not, {
    let fixture = Fixture::new();
    let conversation = fixture.model().conversation().tools([add()]).build();
    let first = send!(conversation.chain("add please")).unwrap();
    assert!(first.warnings().is_empty());
    let reworded = send!(first.reply("add again").tools([add_reworded()]).chain()).unwrap();
    assert!(reworded.warnings().is_empty(), "a description is not drift");
    let drifted = send!(reworded.reply("add more").tools([add_three()])).unwrap();
    assert_eq!(drifted.warnings().len(), 1);
    assert_eq!(drifted.warnings()[0].tool, "add");
    assert_ne!(
        drifted.warnings()[0].previous_schema,
        drifted.warnings()[0].current_schema
    );
});

both_forms!(
    every_entry_point_sends_byte_identical_requests_for_the_same_history,
    {
        let fixture = Fixture::new();
        let model = fixture.model();
        let conversation = model.conversation().tools([fixture.tool("a")]).build();
        send!(conversation.prompt("one")).unwrap();
        let through_conversation = send!(conversation.prompt("two")).unwrap();

        let first = send!(
            model
                .conversation()
                .tools([fixture.tool("a")])
                .build()
                .prompt("one")
        )
        .unwrap();
        let through_reply = send!(first.reply("two")).unwrap();
        let through_fork = send!(first.fork().prompt("two")).unwrap();

        let requests = fixture.main.requests();
        let (a, b, c) = (&requests[1], &requests[3], &requests[4]);
        for other in [b, c] {
            assert_eq!(a.model, other.model);
            assert_eq!(a.thread.head_id(), other.thread.head_id());
            assert_eq!(a.thread.messages(), other.thread.messages());
            assert_eq!(a.tools, other.tools);
            assert_eq!(a.options, other.options);
            assert_eq!(a.output_schema, other.output_schema);
            assert_eq!(
                a.annotations.iter().collect::<Vec<_>>(),
                other.annotations.iter().collect::<Vec<_>>()
            );
        }
        assert_eq!(through_conversation.head(), through_reply.head());
        assert_eq!(through_reply.head(), through_fork.head());
    }
);

both_forms!(a_fork_of_a_fork_of_a_fork_loads_the_right_history, {
    let fixture = Fixture::new();
    let (_dir, store) = store();
    let model = fixture.model();
    let root = send!(model.conversation().store(&store).build().prompt("root")).unwrap();
    send!(root.reply("main line")).unwrap();
    let one = send!(root.fork().prompt("first fork")).unwrap();
    let two = send!(one.fork().prompt("second fork")).unwrap();
    let three = send!(two.fork().prompt("third fork")).unwrap();
    let id = three.conversation().id().to_string();
    let loaded = load!(&store, &id[..8], &model).unwrap();
    assert_eq!(
        transcript(&loaded.thread()),
        [
            "User: root",
            "Assistant: you said: root",
            "User: first fork",
            "Assistant: you said: first fork",
            "User: second fork",
            "Assistant: you said: second fork",
            "User: third fork",
            "Assistant: you said: third fork"
        ]
    );
    let row = store.conversation(&three.conversation().id()).unwrap();
    assert_eq!(
        row.origin.and_then(|origin| origin.conversation),
        Some(two.conversation().id().clone())
    );
});

both_forms!(reply_after_a_chain_continues_from_its_final_response, {
    let fixture = Fixture::new();
    let chain = send!(fixture.model().chain("please add", [fixture.tool("add")])).unwrap();
    let reply = send!(chain.reply("thanks")).unwrap();
    assert_eq!(
        reply.thread().parent().parent().head_id(),
        Some(chain.last().head())
    );
    assert_eq!(
        fixture.main.last().thread.parent().head_id(),
        Some(chain.last().head())
    );
});

both_forms!(a_panicking_tool_is_an_error_result_and_the_chain_goes_on, {
    let fixture = Fixture::new();
    let chain = send!(fixture.model().chain("explode", [fixture.tool("explode")])).unwrap();
    assert_eq!(chain.status(), ChainStatus::Completed);
    assert_eq!(chain.responses().len(), 2);
    let result = chain
        .thread()
        .parent()
        .head()
        .unwrap()
        .message()
        .tool_results_iter()
        .next()
        .cloned()
        .unwrap();
    assert!(result.is_error);
    assert!(result.content.contains("kaboom"), "{}", result.content);
});

both_forms!(a_chain_stopped_by_before_call_records_what_it_completed, {
    let fixture = Fixture::new();
    let (_dir, store) = store();
    let conversation = fixture
        .model()
        .conversation()
        .tools([fixture.tool("add")])
        .store(&store)
        .before_call(|_| Box::pin(async { CallDecision::Stop }))
        .build();
    let chain = send!(conversation.chain("add these")).unwrap();
    assert_eq!(chain.status(), ChainStatus::Stopped);
    assert_eq!(chain.responses().len(), 1);
    let stored = store.conversation(&conversation.id()).unwrap();
    let thread = store.load_thread(stored.head.unwrap()).unwrap();
    let last = thread.head().unwrap().message().clone();
    assert_eq!(last.role, Role::Tool);
    let result = last.tool_results_iter().next().unwrap();
    assert!(result.is_error);
    assert!(
        result.content.contains("application cancelled"),
        "{}",
        result.content
    );
    assert_eq!(
        store
            .runs_of_conversation(&conversation.id())
            .unwrap()
            .len(),
        1
    );
    assert!(store.verify().unwrap().is_ok());
});

both_forms!(a_chain_whose_model_call_fails_keeps_the_completed_calls, {
    let fixture = Fixture::new();
    let (_dir, store) = store();
    let conversation = fixture
        .model()
        .conversation()
        .tools([fixture.tool("add")])
        .store(&store)
        .build();
    let error = send!(conversation.chain("add then fail")).unwrap_err();
    match &error {
        Error::ChainFailed { completed, .. } => assert_eq!(*completed, 1),
        other => panic!("expected a failed chain, got {other:?}"),
    }
    let stored = store.conversation(&conversation.id()).unwrap();
    let thread = store.load_thread(stored.head.unwrap()).unwrap();
    assert_eq!(thread.head().unwrap().message().role, Role::Tool);
    assert_eq!(conversation.head(), stored.head);
    // The completed call, and the call the chain failed in, which keeps its
    // record (no node) in the same write.
    // (Listed by start time: both may start within one millisecond.)
    let runs = store.runs_of_conversation(&conversation.id()).unwrap();
    assert_eq!(runs.len(), 2);
    let (failed, succeeded): (Vec<_>, Vec<_>) =
        runs.iter().partition(|run| run.status == RunStatus::Failed);
    assert_eq!((failed.len(), succeeded.len()), (1, 1));
    assert_eq!(succeeded[0].status, RunStatus::Succeeded);
    assert_eq!(failed[0].output_head, None);
    assert_eq!(failed[0].input_head, stored.head);
    assert_consistent(&store);
});

both_forms!(the_chain_limit_ends_the_chain_with_a_clear_status, {
    let fixture = Fixture::new();
    let conversation = fixture
        .model()
        .conversation()
        .tools([fixture.tool("add")])
        .chain_limit(1)
        .build();
    let chain = send!(conversation.chain("add")).unwrap();
    assert_eq!(chain.status(), ChainStatus::LimitReached);
    assert_eq!(chain.responses().len(), 1);
});

both_forms!(
    a_loops_own_limit_replaces_the_conversations_for_that_loop_only,
    {
        let fixture = Fixture::new();
        let conversation = fixture
            .model()
            .conversation()
            .tools([fixture.tool("add")])
            .build();
        let limited = send!(conversation.chain("add").limit(1)).unwrap();
        assert_eq!(limited.status(), ChainStatus::LimitReached);
        assert_eq!(limited.responses().len(), 1);
        // The conversation's own limit (the default) is untouched.
        let free = send!(conversation.chain("add")).unwrap();
        assert_eq!(free.status(), ChainStatus::Completed);
        assert_eq!(free.responses().len(), 2);
        // A loop may also raise a tight conversation limit for itself.
        let tight = fixture
            .model()
            .conversation()
            .tools([fixture.tool("add")])
            .chain_limit(1)
            .build();
        let raised = send!(tight.chain("add").limit(3)).unwrap();
        assert_eq!(raised.status(), ChainStatus::Completed);
        assert_eq!(raised.responses().len(), 2);
        assert_eq!(tight.chain_limit(), 1);
        let again = send!(tight.chain("add")).unwrap();
        assert_eq!(again.status(), ChainStatus::LimitReached);
    }
);

both_forms!(per_call_tool_sets_are_recorded_on_each_run, {
    let fixture = Fixture::new();
    let (_dir, store) = store();
    let conversation = fixture
        .model()
        .conversation()
        .tools([fixture.tool("a"), fixture.tool("b")])
        .store(&store)
        .build();
    let chain = send!(conversation.chain("use a")).unwrap();
    let reply = send!(
        chain
            .reply("use b")
            .tools([fixture.tool("b"), fixture.tool("c")])
    )
    .unwrap();
    for response in chain.responses() {
        let run = store.run_record(response.run_id()).unwrap();
        assert_eq!(names(&run.tools), ["a", "b"]);
    }
    let run = store.run_record(reply.run_id()).unwrap();
    assert_eq!(names(&run.tools), ["b", "c"]);
    assert_eq!(run.tools, reply.tools());
});

both_forms!(
    loading_restores_model_tools_and_chain_limit_but_never_hooks,
    {
        let fixture = Fixture::new();
        let (_dir, store) = store();
        let conversation = fixture
            .other_model()
            .conversation()
            .name("saved")
            .tools([fixture.tool("add")])
            .chain_limit(3)
            .before_call(|_| Box::pin(async { CallDecision::Stop }))
            .store(&store)
            .build();
        send!(conversation.prompt("hello")).unwrap();
        let loaded = load!(&store, conversation.id().as_str(), &fixture.model()).unwrap();
        assert_eq!(loaded.id(), conversation.id());
        assert_eq!(loaded.name().as_deref(), Some("saved"));
        assert_eq!(loaded.model().name(), "other");
        assert_eq!(loaded.chain_limit(), 3);
        assert_eq!(loaded.tools().len(), 1);
        assert_eq!(loaded.head(), conversation.head());
        // No hook: the chain runs its tool instead of being stopped.
        let chain = send!(loaded.chain("add")).unwrap();
        assert_eq!(chain.status(), ChainStatus::Completed);
        assert_eq!(chain.text(), "done: 5");
        assert_eq!(fixture.other.count(), 3);
    }
);

both_forms!(
    loading_a_conversation_whose_tool_is_not_registered_says_which,
    {
        let fixture = Fixture::new();
        let (_dir, store) = store();
        let conversation = fixture
            .model()
            .conversation()
            .tools([add_three()])
            .store(&store)
            .build();
        send!(conversation.prompt("hi")).unwrap();
        let bare = skein::Model::open("echo").unwrap();
        let error = load!(&store, conversation.id().as_str(), &bare).unwrap_err();
        assert!(
            matches!(&error, Error::Engine(_)),
            "the stored profile is unknown to a bare engine: {error}"
        );
        // With the profile known but the tool missing, the error names the tool.
        let catalog = skein::engine::config::Catalog::new()
            .backend(skein::engine::config::BackendDef::new(
                "main",
                skein::engine::config::BackendKind::Echo,
            ))
            .profile(skein::engine::config::Profile::new("main", "main", "m"));
        let engine = skein::Engine::builder(catalog).build().unwrap();
        let home = skein::Model::from_profile(&engine, "main").unwrap();
        let error = load!(&store, conversation.id().as_str(), &home).unwrap_err();
        match &error {
            Error::UnknownTool {
                tool, registered, ..
            } => {
                assert_eq!(tool, "add");
                assert!(registered.is_empty());
            }
            other => panic!("expected an unknown tool, got {other:?}"),
        }
        assert!(error.to_string().contains("EngineBuilder::tool"), "{error}");
    }
);

both_forms!(
    a_failed_first_turn_leaves_no_conversation_and_records_the_run,
    {
        let fixture = Fixture::new();
        let (_dir, store) = store();
        let conversation = fixture.model().conversation().store(&store).build();
        let error = send!(conversation.prompt("fail now")).unwrap_err();
        assert!(matches!(error, Error::Engine(_)), "{error}");
        assert!(store.list_conversations(10).unwrap().is_empty());
        // The user's message is kept, and the failed run, in no
        // conversation, names it as its input.
        assert_eq!(count(&store, "nodes"), 1);
        let runs = store.recent_runs(10).unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].status, RunStatus::Failed);
        assert_eq!(runs[0].conversation, None);
        assert_eq!(input_text(&store, &runs[0]), "fail now");
        assert!(conversation.head().is_none());
        assert_consistent(&store);
        // The conversation still works afterwards.
        send!(conversation.prompt("hello")).unwrap();
        assert_eq!(store.list_conversations(10).unwrap().len(), 1);
    }
);

both_forms!(
    a_failed_turn_keeps_its_message_and_its_run_and_moves_nothing,
    {
        let fixture = Fixture::new();
        let (_dir, store) = store();
        let conversation = fixture.model().conversation().store(&store).build();
        let first = send!(conversation.prompt("hello")).unwrap();
        // A provider error, then a reply that never meets its schema
        // (the scripted model does not answer in JSON).
        let error = send!(conversation.prompt("fail now, zebra")).unwrap_err();
        assert!(matches!(error, Error::Engine(_)), "{error}");
        let error = send!(
            conversation
                .prompt("a number, yak")
                .schema(serde_json::json!({"type": "integer"}))
        )
        .unwrap_err();
        assert!(
            matches!(error, Error::Engine(EngineError::Validation { .. })),
            "{error}"
        );
        assert_eq!(conversation.head(), Some(first.head()));
        let stored = store.conversation(&conversation.id()).unwrap();
        assert_eq!(stored.head, Some(first.head()), "no bookmark moved");
        let runs = store.runs_of_conversation(&conversation.id()).unwrap();
        let failed: Vec<_> = runs
            .iter()
            .filter(|run| run.status == RunStatus::Failed)
            .collect();
        assert_eq!(failed.len(), 2);
        let mut inputs: Vec<_> = failed.iter().map(|run| input_text(&store, run)).collect();
        inputs.sort();
        assert_eq!(inputs, ["a number, yak", "fail now, zebra"]);
        for run in &failed {
            assert_eq!(run.output_head, None);
            let input = store.node(run.input_head.unwrap()).unwrap();
            assert_eq!(
                input.parent,
                Some(first.head()),
                "after the head it started at"
            );
        }
        // What the user typed can be found.
        for word in ["zebra", "yak"] {
            let found = store.search(&skein::store::SearchQuery::new(word)).unwrap();
            assert_eq!(found.matches.len(), 1, "{word}");
            assert_eq!(found.matches[0].role, Role::User);
        }
        assert_consistent(&store);
        // The conversation goes on from where it was.
        let next = send!(conversation.prompt("again")).unwrap();
        assert_eq!(
            next.thread().parent().parent().head_id(),
            Some(first.head())
        );
    }
);

both_forms!(streaming_hands_over_the_whole_text, {
    let fixture = Fixture::new();
    let streamed = Arc::new(Mutex::new(String::new()));
    let sink = streamed.clone();
    let response = send!(
        fixture
            .model()
            .prompt("stream this")
            .on_text(move |text| sink.lock().unwrap().push_str(text))
    )
    .unwrap();
    assert_eq!(*streamed.lock().unwrap(), response.text());
});

/// Streams "first words, ", then holds its last piece until released.
struct HoldsItsLastPiece {
    release: Arc<tokio::sync::Notify>,
}

impl skein::core::Provider for HoldsItsLastPiece {
    fn name(&self) -> &str {
        "holds"
    }

    fn stream(
        &self,
        _: skein::core::provider::ModelRequest,
    ) -> skein::core::provider::BoxStream<
        'static,
        Result<skein::core::provider::StreamEvent, skein::core::ProviderError>,
    > {
        use skein::core::provider::StreamEvent;
        let release = self.release.clone();
        Box::pin(futures_util::stream::unfold(0, move |step| {
            let release = release.clone();
            async move {
                let event = match step {
                    0 => StreamEvent::Text("first words, ".into()),
                    1 => {
                        release.notified().await;
                        StreamEvent::Text("last words".into())
                    }
                    2 => StreamEvent::Done(skein::core::FinishReason::Stop),
                    _ => return None,
                };
                Some((Ok(event), step + 1))
            }
        }))
    }
}

/// Text reaches the sink while the reply is still being generated: the
/// provider holds its last piece until the test has seen the first.
#[tokio::test(flavor = "current_thread")]
async fn streamed_text_arrives_before_the_reply_ends() {
    use skein::engine::config::{BackendDef, BackendKind, Catalog, Profile};
    let release = Arc::new(tokio::sync::Notify::new());
    let catalog = Catalog::new()
        .backend(BackendDef::new("held", BackendKind::Echo))
        .profile(Profile::new("held", "held", "held-model"));
    let engine = skein::Engine::builder(catalog)
        .provider(
            "held",
            Arc::new(HoldsItsLastPiece {
                release: release.clone(),
            }),
        )
        .build()
        .unwrap();
    let model = skein::Model::from_profile(&engine, "held").unwrap();
    let (pieces, mut received) = tokio::sync::mpsc::unbounded_channel();
    let turn = tokio::spawn(
        model
            .prompt("stream this")
            .on_text(move |text| {
                let _ = pieces.send(text.to_string());
            })
            .send(),
    );
    // Everything between the provider and the sink is in-process, on this
    // thread: each yield lets the turn's task go as far as it can. A sink
    // fed only at the end would see nothing however long this loops.
    let mut first = None;
    for _ in 0..10_000 {
        if let Ok(piece) = received.try_recv() {
            first = Some(piece);
            break;
        }
        assert!(
            !turn.is_finished(),
            "the reply cannot end before its release"
        );
        tokio::task::yield_now().await;
    }
    assert_eq!(
        first.as_deref(),
        Some("first words, "),
        "no text reached the sink before the reply ended"
    );
    assert!(!turn.is_finished());
    release.notify_one();
    let response = turn.await.unwrap().unwrap();
    assert_eq!(received.recv().await.as_deref(), Some("last words"));
    assert_eq!(response.text(), "first words, last words");
}

#[tokio::test]
async fn blocking_forms_refuse_to_run_inside_a_runtime() {
    let fixture = Fixture::new();
    let error = fixture.model().prompt("hi").send_blocking().unwrap_err();
    assert!(matches!(error, Error::InsideRuntime), "{error}");
    assert!(error.to_string().contains(".await"));
}

/// A `before_call` that lets every call run and counts them.
fn counting(
    count: &Arc<AtomicUsize>,
) -> impl Fn(&skein::ToolCall) -> skein::core::BoxFuture<'_, CallDecision> + Send + Sync + 'static {
    let count = count.clone();
    move |call| {
        count.fetch_add(1, Ordering::SeqCst);
        let call = call.clone();
        Box::pin(async move { CallDecision::Run(call) })
    }
}

both_forms!(a_chains_own_hooks_apply_to_that_chain_only, {
    let fixture = Fixture::new();
    let before = Arc::new(AtomicUsize::new(0));
    let after: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = after.clone();
    let conversation = fixture
        .model()
        .conversation()
        .tools([fixture.tool("add")])
        .before_call(counting(&before))
        .after_call(move |_, result| {
            seen.lock().unwrap().push(result.content.clone());
            Box::pin(async {})
        })
        .build();

    // A chain's `before_call` rewrites the call; it replaces the
    // conversation's, whose `after_call` still sees the call.
    let rewritten = send!(conversation.chain("add these").before_call(|call| {
        let mut call = call.clone();
        call.arguments = r#"{"a": 10, "b": 3}"#.into();
        Box::pin(async move { CallDecision::Run(call) })
    }))
    .unwrap();
    assert_eq!(rewritten.text(), "done: 13");
    assert_eq!(before.load(Ordering::SeqCst), 0);
    assert_eq!(*after.lock().unwrap(), ["13"]);

    // One that skips the call: the model gets an error result and goes on.
    let skipped = send!(
        conversation
            .chain("add these")
            .before_call(|_| Box::pin(async { CallDecision::Skip("not now".into()) }))
    )
    .unwrap();
    assert_eq!(skipped.status(), ChainStatus::Completed);
    assert_eq!(
        skipped.text(),
        "done: the application cancelled this call: not now"
    );

    // One that stops the chain, with an `after_call` of its own.
    let own: Arc<Mutex<Vec<String>>> = Arc::default();
    let mine = own.clone();
    let stopped = send!(
        conversation
            .chain("add these")
            .before_call(|_| Box::pin(async { CallDecision::Stop }))
            .after_call(move |call, _| {
                mine.lock().unwrap().push(call.name.clone());
                Box::pin(async {})
            })
    )
    .unwrap();
    assert_eq!(stopped.status(), ChainStatus::Stopped);
    assert_eq!(stopped.responses().len(), 1);
    assert_eq!(*own.lock().unwrap(), ["add"]);

    // The conversation's own hooks are as they were.
    assert_eq!(before.load(Ordering::SeqCst), 0);
    assert_eq!(
        after.lock().unwrap().len(),
        2,
        "not the stopped chain's call"
    );
    let plain = send!(conversation.chain("add these")).unwrap();
    assert_eq!(plain.text(), "done: 5");
    assert_eq!(before.load(Ordering::SeqCst), 1);
    assert_eq!(after.lock().unwrap().last().map(String::as_str), Some("5"));

    // `model.chain` takes them too.
    let ad_hoc = send!(
        fixture
            .model()
            .chain("add these", [fixture.tool("add")])
            .before_call(|_| Box::pin(async { CallDecision::Stop }))
    )
    .unwrap();
    assert_eq!(ad_hoc.status(), ChainStatus::Stopped);
});

both_forms!(a_fork_starts_without_hooks_and_a_reply_keeps_them, {
    let fixture = Fixture::new();
    let calls = Arc::new(AtomicUsize::new(0));
    let conversation = fixture
        .model()
        .conversation()
        .tools([fixture.tool("add")])
        .before_call(counting(&calls))
        .build();
    let first = send!(conversation.chain("add these")).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    // A reply from the head continues the conversation, hooks and all.
    send!(first.reply("add again").chain()).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // A reply to an earlier response branches, and keeps the hooks.
    let branch = send!(first.reply("add once more").chain()).unwrap();
    assert_ne!(branch.conversation().id(), conversation.id());
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // A fork does not: its tools run without the hook.
    let forked = send!(first.last().fork().prompt("add in a fork").chain()).unwrap();
    assert_eq!(forked.text(), "done: 5");
    let created = create!(conversation.fork()).unwrap();
    send!(created.chain("add in another")).unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 3);
});

both_forms!(
    a_turn_made_of_messages_sends_them_in_order_with_their_annotations,
    {
        let fixture = Fixture::new();
        let first = send!(fixture.model().prompt("hello")).unwrap();
        let picture = Part::Attachment(Attachment {
            media_type: "image/png".into(),
            data: vec![0x89, b'P', b'N', b'G'],
        });
        let input = TurnInput::new()
            .annotated(
                Message::new(
                    Role::User,
                    vec![Part::text("a long document"), picture.clone()],
                ),
                [(0, Annotation::CacheHint(CacheHint::Ephemeral))],
            )
            .message(Message::user("and a question"));
        let reply = send!(first.reply(input)).unwrap();
        assert_eq!(reply.text(), "you said: and a question");
        let request = fixture.main.last();
        assert_eq!(
            transcript(&request.thread),
            [
                "User: hello",
                "Assistant: you said: hello",
                "User: a long document",
                "User: and a question"
            ]
        );
        let document = request.thread.parent();
        let document_id = document.head_id().unwrap();
        assert_eq!(document.head().unwrap().message().parts[1], picture);
        assert_eq!(
            request.annotations.cache_hint(document_id, 0),
            Some(CacheHint::Ephemeral)
        );
        assert_eq!(request.annotations.cache_hint(document_id, 1), None);
        // The annotation is part of the history now: the next turn sends it.
        send!(reply.reply("more")).unwrap();
        assert_eq!(
            fixture.main.last().annotations.cache_hint(document_id, 0),
            Some(CacheHint::Ephemeral)
        );
        // Several messages as a first turn, through `model.prompt`.
        send!(
            fixture
                .model()
                .prompt(vec![Message::user("one"), Message::user("two")])
        )
        .unwrap();
        assert_eq!(
            transcript(&fixture.main.last().thread),
            ["User: one", "User: two"]
        );
        // An annotation past its message's parts is refused before any call.
        let made = fixture.main.count();
        let error = send!(first.reply(
            TurnInput::new().annotated(Message::user("x"), [(3, Annotation::Source("s".into()))])
        ))
        .unwrap_err();
        assert!(
            matches!(&error, Error::Engine(EngineError::InvalidRequest(_))),
            "{error}"
        );
        assert!(error.to_string().contains("part 3"), "{error}");
        assert_eq!(fixture.main.count(), made);
    }
);

both_forms!(
    tool_results_from_the_caller_and_an_empty_prompt_continue_from_the_history,
    {
        let fixture = Fixture::new();
        let (_dir, store) = store();
        let conversation = fixture
            .model()
            .conversation()
            .tools([fixture.tool("add")])
            .store(&store)
            .build();
        // One model call offering `add` without running it: the caller runs
        // the call and answers with its result, adding no text.
        let asked = send!(conversation.prompt("add these")).unwrap();
        let call = asked.tool_calls().next().unwrap().clone();
        let result = ToolResult {
            call_id: call.id.clone(),
            content: "5".into(),
            is_error: false,
        };
        let answered = send!(asked.reply(Message::tool_results([result]))).unwrap();
        assert_eq!(answered.text(), "done: 5");
        let request = fixture.main.last();
        assert_eq!(request.thread.head().unwrap().message().role, Role::Tool);
        assert_eq!(request.thread.parent().head_id(), Some(asked.head()));

        // A chain stopped by its hook leaves results in the history; an
        // empty prompt lets the model go on from them.
        let stopped = send!(
            conversation
                .chain("add these")
                .before_call(|_| Box::pin(async { CallDecision::Stop }))
        )
        .unwrap();
        assert_eq!(stopped.status(), ChainStatus::Stopped);
        let results = conversation.head();
        let went_on = send!(conversation.prompt(TurnInput::new())).unwrap();
        assert_eq!(
            went_on.text(),
            "done: the application cancelled this call: the chain was stopped"
        );
        assert_eq!(fixture.main.last().thread.head_id(), results);
        assert_eq!(went_on.thread().parent().head_id(), results);
        let row = store.conversation(&conversation.id()).unwrap();
        assert_eq!(row.head, Some(went_on.head()));
        assert_eq!(
            store.run_record(went_on.run_id()).unwrap().input_head,
            results
        );
        // The same from a chain response, in a reply of no new text.
        let again = send!(stopped.reply(Vec::<Message>::new())).unwrap();
        assert_eq!(again.thread().parent().head_id(), results);

        // With no history there is nothing to go on from: refused before
        // any model call, recording nothing.
        let empty = fixture.model().conversation().store(&store).build();
        let made = fixture.main.count();
        let error = send!(empty.prompt(TurnInput::new())).unwrap_err();
        assert!(
            matches!(&error, Error::Engine(EngineError::InvalidRequest(_))),
            "{error}"
        );
        assert!(error.to_string().contains("history to continue"), "{error}");
        assert_eq!(fixture.main.count(), made);
        assert!(store.conversation(&empty.id()).is_err());
    }
);

both_forms!(
    a_loaded_conversation_warns_when_a_schema_changed_since_its_recorded_calls,
    {
        let (_dir, store) = store();
        let yesterday = Fixture::new();
        let conversation = yesterday
            .model()
            .conversation()
            .tools([yesterday.tool("add")])
            .store(&store)
            .build();
        let chain = send!(conversation.chain("add these")).unwrap();
        assert!(chain.warnings().is_empty());
        let id = conversation.id().to_string();

        // Another process, the same tool: nothing to warn about.
        let same = Fixture::new();
        let loaded = load!(&store, &id, &same.model()).unwrap();
        let unchanged = send!(loaded.chain("add again")).unwrap();
        assert!(unchanged.warnings().is_empty());
        let fork = create!(unchanged.last().fork()).unwrap();

        // Today `add` takes three numbers: a loaded conversation warns on
        // its first call, and so does a stored fork of it (whose own
        // history was produced by its origin's calls).
        let today = Fixture::with_tools([add_three()]);
        for id in [id.clone(), fork.id().to_string()] {
            let loaded = load!(&store, &id, &today.model()).unwrap();
            let drifted = send!(loaded.chain("add more")).unwrap();
            let warnings = drifted.warnings();
            assert_eq!(warnings.len(), 1, "{id}");
            assert_eq!(warnings[0].tool, "add");
            assert_eq!(warnings[0].previous_schema, add().spec().schema_hash());
            assert_eq!(warnings[0].current_schema, add_three().spec().schema_hash());
            assert_eq!(drifted.responses()[0].warnings(), warnings.as_slice());
        }

        // Its last recorded call offered today's schema: no warning now,
        // and going back to yesterday's warns again.
        let loaded = load!(&store, &id, &today.model()).unwrap();
        assert!(send!(loaded.prompt("hi")).unwrap().warnings().is_empty());
        let loaded = load!(&store, &id, &same.model()).unwrap();
        let back = send!(loaded.prompt("hi")).unwrap();
        assert_eq!(back.warnings().len(), 1);
        assert_eq!(
            back.warnings()[0].current_schema,
            add().spec().schema_hash()
        );
    }
);

/// Passes requests to the scripted model once released: lets a test start
/// two turns from the same head before either can finish.
struct Gated {
    inner: Arc<dyn skein::core::Provider>,
    arrived: AtomicUsize,
    release: Arc<tokio::sync::Semaphore>,
}

impl skein::core::Provider for Gated {
    fn name(&self) -> &str {
        "gated"
    }

    fn stream(
        &self,
        request: skein::core::provider::ModelRequest,
    ) -> skein::core::provider::BoxStream<
        'static,
        Result<skein::core::provider::StreamEvent, skein::core::ProviderError>,
    > {
        use futures_util::StreamExt;
        self.arrived.fetch_add(1, Ordering::SeqCst);
        let inner = self.inner.stream(request);
        let release = self.release.clone();
        Box::pin(
            futures_util::stream::once(async move {
                release.acquire().await.unwrap().forget();
                inner
            })
            .flatten(),
        )
    }
}

/// A model whose calls wait at the provider until `release` lets them
/// through, counting those that `arrived`.
fn gated_model() -> (Arc<Gated>, skein::Model) {
    use skein::engine::config::{BackendDef, BackendKind, Catalog, Profile};
    let gated = Arc::new(Gated {
        inner: Arc::new(skein::providers::Scripted::from_toml_str(SCRIPT).unwrap()),
        arrived: AtomicUsize::new(0),
        release: Arc::new(tokio::sync::Semaphore::new(0)),
    });
    let catalog = Catalog::new()
        .backend(BackendDef::new("main", BackendKind::Echo))
        .profile(Profile::new("main", "main", "main-model"));
    let engine = skein::Engine::builder(catalog)
        .provider("main", gated.clone())
        .build()
        .unwrap();
    (
        gated.clone(),
        skein::Model::from_profile(&engine, "main").unwrap(),
    )
}

/// Two turns started from the same head that ask to be told
/// (`OnMoved::Fail`), in memory and with a store: exactly one moves the
/// bookmark; the other gets `HeadMoved` with its response, so no update is
/// lost (both succeeding would be one).
#[tokio::test]
async fn a_turn_racing_another_on_the_same_conversation_keeps_its_response_when_asked_to_fail() {
    use skein::OnMoved;
    let (_dir, store) = store();
    for store in [None, Some(store)] {
        let (gated, model) = gated_model();
        let mut builder = model.conversation();
        if let Some(store) = &store {
            builder = builder.store(store);
        }
        let conversation = builder.build();
        gated.release.add_permits(1);
        let first = conversation.prompt("one").send().await.unwrap();
        let a = tokio::spawn(first.reply("a").on_moved(OnMoved::Fail).send());
        let b = tokio::spawn(conversation.prompt("b").on_moved(OnMoved::Fail).send());
        // Both have rendered their request from `first`'s head before
        // either may finish.
        while gated.arrived.load(Ordering::SeqCst) < 3 {
            tokio::task::yield_now().await;
        }
        gated.release.add_permits(2);
        let outcomes = [a.await.unwrap(), b.await.unwrap()];
        let won: Vec<_> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
        let moved: Vec<_> = outcomes
            .iter()
            .filter_map(|outcome| match outcome {
                Err(Error::HeadMoved {
                    response, current, ..
                }) => Some((response, current)),
                _ => None,
            })
            .collect();
        assert_eq!(
            (won.len(), moved.len()),
            (1, 1),
            "one turn wins, the other learns it lost: {outcomes:?}"
        );
        let (winner, (loser, current)) = (won[0], moved[0]);
        assert_eq!(conversation.head(), Some(winner.head()));
        assert_eq!(*current, Some(winner.head()));
        assert_eq!(
            loser.thread().parent().parent().head_id(),
            Some(first.head())
        );
        if let Some(store) = &store {
            let row = store.conversation(&conversation.id()).unwrap();
            assert_eq!(row.head, Some(winner.head()));
            // The loser's nodes and run are stored all the same.
            assert!(store.contains(loser.head()).unwrap());
            store.run_record(loser.run_id()).unwrap();
        }
        // The kept response can still become a branch.
        let branch = loser.fork().create().await.unwrap();
        assert_eq!(branch.head(), Some(loser.head()));
    }
}

/// The landing rule, by default: of turns racing from one head (plain
/// turns and a tool loop), one extends the conversation and each other lands
/// in a new branch whose origin is the conversation and the node the turn
/// started from, in memory and with a store; its response belongs to the
/// branch, which goes on from it. The handle the turns shared stays with the
/// winner (its own turn moved it). No reply is left unreachable, and the
/// store verifies.
#[tokio::test]
async fn a_turn_that_loses_its_race_lands_in_a_branch() {
    let (_dir, store) = store();
    for store in [None, Some(store)] {
        let (gated, model) = gated_model();
        let mut builder = model.conversation();
        if let Some(store) = &store {
            builder = builder.store(store);
        }
        let conversation = builder.build();
        gated.release.add_permits(1);
        let first = conversation.prompt("one").send().await.unwrap();
        let start = first.head();
        let turns = [
            tokio::spawn(first.reply("a").send()),
            tokio::spawn(conversation.prompt("b").send()),
            tokio::spawn({
                let chain = conversation.chain("c").send();
                async move { chain.await.map(|chain| chain.last().clone()) }
            }),
        ];
        while gated.arrived.load(Ordering::SeqCst) < 4 {
            tokio::task::yield_now().await;
        }
        gated.release.add_permits(3);
        let mut landed = Vec::new();
        for turn in turns {
            landed.push(turn.await.unwrap().expect("no turn is lost"));
        }
        // Each response says where it landed; no id needs comparing.
        let (won, branched): (Vec<_>, Vec<_>) = landed
            .iter()
            .partition(|response| !matches!(response.landed(), Landed::Branched { .. }));
        assert_eq!((won.len(), branched.len()), (1, 2), "{landed:?}");
        assert_eq!(conversation.head(), Some(won[0].head()));
        let here = match &store {
            Some(_) => Landed::In(conversation.id()),
            None => Landed::Unrecorded,
        };
        assert_eq!(won[0].landed(), &here);
        for response in branched {
            let branch = response.conversation();
            assert_ne!(branch.id(), conversation.id());
            assert_eq!(
                response.landed(),
                &Landed::Branched {
                    conversation: branch.id(),
                    from: conversation.id(),
                }
            );
            assert_eq!(branch.head(), Some(response.head()));
            assert_eq!(
                branch.origin(),
                Some(Origin {
                    node: Some(start),
                    conversation: Some(conversation.id().clone()),
                    rerun: None,
                })
            );
            assert_eq!(branch.model().name(), conversation.model().name());
            assert_eq!(
                response.thread().parent().parent().head_id(),
                Some(start),
                "the turn went on from where it started"
            );
            if let Some(store) = &store {
                assert!(branch.is_stored());
                let row = store.conversation(&branch.id()).unwrap();
                assert_eq!(row.head, Some(response.head()));
                assert_eq!(row.origin, branch.origin());
                let run = store.run_record(response.run_id()).unwrap();
                assert_eq!(run.conversation.as_ref(), Some(&branch.id()));
            }
            // The branch goes on from its own head.
            gated.release.add_permits(1);
            let next = branch.prompt("d").send().await.unwrap();
            assert_eq!(next.conversation().id(), branch.id());
            assert_eq!(
                next.thread().parent().parent().head_id(),
                Some(response.head())
            );
        }
        if let Some(store) = &store {
            assert_eq!(store.list_conversations(10).unwrap().len(), 3);
            let report = store.verify().unwrap();
            assert!(report.is_ok(), "{:?}", report.problems);
        }
    }
}

/// A handle whose conversation another writer moved on (another handle,
/// as another process would) lands its next turn in a branch at the head it
/// knew, and follows it there: its id names the branch, and its later turns
/// extend the branch instead of branching again at every turn.
#[tokio::test]
async fn a_stale_handle_follows_its_turn_into_the_branch_it_lands_in() {
    let (_dir, store) = store();
    let model = skein::Model::open("echo").unwrap();
    let original = model.conversation().store(&store).build();
    let first = original.prompt("one").send().await.unwrap();
    let id = original.id();
    let early = Conversation::load(&store, &id, &model).await.unwrap();
    let late = Conversation::load(&store, &id, &model).await.unwrap();

    early.prompt("fast").send().await.unwrap();
    let slow = late.prompt("slow").send().await.unwrap();
    let branch = late.id();
    assert_ne!(branch, id, "the late turn branched");
    assert_eq!(slow.conversation().id(), branch);
    assert_eq!(first.landed(), &Landed::In(id.clone()));
    assert_eq!(
        slow.landed(),
        &Landed::Branched {
            conversation: branch.clone(),
            from: id.clone(),
        }
    );
    assert_eq!(
        late.origin(),
        Some(Origin {
            node: Some(first.head()),
            conversation: Some(id.clone()),
            rerun: None,
        })
    );
    assert_eq!(late.head(), Some(slow.head()));

    let more = late.prompt("more").send().await.unwrap();
    assert_eq!(more.conversation().id(), branch, "extends the branch");
    assert_eq!(more.landed(), &Landed::In(branch.clone()));
    assert_eq!(store.list_conversations(10).unwrap().len(), 2);
    assert_eq!(store.conversation(&branch).unwrap().head, Some(more.head()));
    assert_eq!(
        store.conversation(&id).unwrap().head,
        early.head(),
        "the original is where the early turn left it"
    );
    assert!(store.verify().unwrap().is_ok());
}

/// A fork is always a conversation of its own (seed 000: "a new
/// conversation with an independent future"; DESIGN invariant 3: a fork
/// never changes its origin), even when its first answer is the very reply
/// its origin ends with (a deterministic model asked the same again): the
/// two share the nodes, never the bookmark, and the origin's next turn and
/// the fork's each move only their own.
#[tokio::test]
async fn a_fork_answered_with_the_reply_its_origin_ends_with_is_a_new_conversation() {
    let (_dir, store) = store();
    let model = skein::Model::open("echo").unwrap();
    let conversation = model.conversation().store(&store).build();
    let first = conversation.prompt("hello").send().await.unwrap();
    let head = first.reply("again").send().await.unwrap();

    let again = first.fork().prompt("again").send().await.unwrap();
    assert_eq!(again.head(), head.head(), "the same reply, the same node");
    let fork = again.conversation().id();
    assert_ne!(fork, conversation.id(), "a new conversation");
    assert!(again.conversation().is_stored());
    assert_eq!(store.list_conversations(10).unwrap().len(), 2);
    let stored = store.conversation(&fork).unwrap();
    assert_eq!(stored.head, Some(head.head()));
    assert_eq!(stored.origin.unwrap().conversation, Some(conversation.id()));
    let run = store.run_record(again.run_id()).unwrap();
    assert_eq!(run.conversation.as_ref(), Some(&fork));

    // Each goes on alone.
    let on_fork = again
        .conversation()
        .prompt("on the fork")
        .send()
        .await
        .unwrap();
    assert_eq!(on_fork.conversation().id(), fork);
    assert_eq!(
        store.conversation(&conversation.id()).unwrap().head,
        Some(head.head()),
        "the origin did not move"
    );
    let on_origin = head.reply("on the origin").send().await.unwrap();
    assert_eq!(on_origin.conversation().id(), conversation.id());
    assert_eq!(
        store.conversation(&fork).unwrap().head,
        Some(on_fork.head()),
        "the fork did not move"
    );
    assert!(store.verify().unwrap().is_ok());
}

/// A fork runs on the model that gave the response it forks from (seed
/// 000: `model or self.model`), not the conversation's default: a turn sent
/// to another model, forked, goes on there; `Fork::model` still chooses.
#[tokio::test]
async fn a_fork_runs_on_the_model_of_the_response_it_forks_from() {
    let (dir, store) = store();
    let script = dir.path().join("other.toml");
    std::fs::write(&script, "[[rules]]\nreply = \"from the other model\"\n").unwrap();
    let echo = skein::Model::open("echo").unwrap();
    let other = skein::Model::open(&format!("scripted:{}", script.display())).unwrap();
    let conversation = echo.conversation().store(&store).build();
    let first = conversation.prompt("hello").send().await.unwrap();
    let answered = first
        .reply("ask the other")
        .model(&other)
        .send()
        .await
        .unwrap();
    assert_eq!(answered.text(), "from the other model");
    assert_eq!(answered.model().name(), other.name());

    let forked = answered.fork().prompt("and then?").send().await.unwrap();
    assert_eq!(
        forked.text(),
        "from the other model",
        "the response's model"
    );
    assert_eq!(forked.conversation().model().name(), other.name());
    let chosen = answered
        .fork()
        .model(&echo)
        .prompt("and then?")
        .send()
        .await
        .unwrap();
    assert!(chosen.text().contains("and then?"), "{}", chosen.text());
    assert!(store.verify().unwrap().is_ok());
}

#[tokio::test]
async fn a_first_turn_whose_name_was_taken_while_it_ran_keeps_its_answer() {
    let (_dir, store) = store();
    let model = skein::Model::open("echo").unwrap();
    // Both are named "trip" before either is stored: the second to land
    // finds the name taken.
    let late = model.conversation().name("trip").store(&store).build();
    let early = model.conversation().name("trip").store(&store).build();
    early.prompt("first").send().await.unwrap();
    let error = late.prompt("kept all the same").send().await.unwrap_err();
    assert!(
        matches!(
            &error,
            Error::Store(skein::store::StoreError::NameTaken { name, .. }) if name == "trip"
        ),
        "{error:?}"
    );
    assert_eq!(
        store.list_conversations(10).unwrap().len(),
        1,
        "no second trip"
    );
    // The answer and its run are stored, in no conversation.
    let run = store
        .recent_runs(10)
        .unwrap()
        .into_iter()
        .find(|run| run.conversation.is_none())
        .expect("the late turn's run is kept");
    assert_eq!(input_text(&store, &run), "kept all the same");
    let answer = store.node(run.output_head.unwrap()).unwrap();
    assert!(answer.message.joined_text().contains("kept all the same"));
    assert_consistent(&store);
}

/// `skein::family`: members joined by origin (a fork of a response, a fork
/// of that fork, a reply to an earlier response, a fork at a mid-thread
/// node, a fork from a rerun's answer), the reruns of their turns, and the
/// conversations that only share messages by content (the same prompt
/// asked again; a fork at a node no conversation produced); and the nodes
/// `Family::graph` shows, within its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_family_is_joined_by_origin_and_lookalikes_only_share() {
    use skein::conversation::family::Joined;
    let fixture = Fixture::new();
    let (_dir, store) = store();
    let main = fixture
        .model()
        .conversation()
        .name("main")
        .store(&store)
        .build();
    let first = main.prompt("hello").send().await.unwrap();
    let second = main.prompt("more").send().await.unwrap();
    let fork = first
        .fork()
        .name("fork")
        .prompt("other")
        .send()
        .await
        .unwrap();
    let deeper = fork
        .fork()
        .name("deeper")
        .prompt("deeper")
        .send()
        .await
        .unwrap();
    let branch = first
        .reply("a reply to an earlier message")
        .send()
        .await
        .unwrap();
    assert_ne!(branch.conversation().id(), main.id());
    let at_node = Conversation::fork_at(&store, first.head(), &fixture.model())
        .await
        .unwrap()
        .name("at-node")
        .prompt("from the node")
        .send()
        .await
        .unwrap();
    // A user message no turn produced: a fork there names no conversation.
    let question = first.thread().parent().head_id().unwrap();
    let bare = Conversation::fork_at(&store, question, &fixture.model())
        .await
        .unwrap()
        .name("bare")
        .prompt("instead")
        .send()
        .await
        .unwrap();
    let again = fixture
        .model()
        .conversation()
        .name("again")
        .store(&store)
        .build();
    again.prompt("hello").send().await.unwrap();
    assert_eq!(
        again
            .head()
            .map(|head| store.load_thread(head).unwrap().nodes()[0].id()),
        Some(first.thread().nodes()[0].id()),
        "the same first message"
    );
    // A rerun of main's second turn and a fork from its answer.
    let answer = second
        .thread()
        .parent()
        .push(Message::assistant("counterfactual"));
    let rerun = skein::store::RerunRecord {
        id: skein::store::RerunId::random(),
        conversation: main.id().clone(),
        turn: 1,
        turn_node: second.head(),
        request_head: second.thread().parent().head_id(),
        answer_head: answer.head_id(),
        ablation: vec!["facts".into()],
        samples: 1,
        sample_runs: vec![],
        baseline_runs: vec![],
        verdict: None,
        summary: "changed".into(),
        detail: serde_json::json!({}),
        created_ms: 1,
    };
    store
        .commit_rerun(&skein::store::RerunCommit {
            record: &rerun,
            threads: std::slice::from_ref(&answer),
            runs: &[],
        })
        .unwrap();
    let from_rerun = store
        .create_conversation(skein::store::NewConversation {
            name: Some("from-rerun".into()),
            head: answer.head_id(),
            origin: Some(Origin {
                node: answer.head_id(),
                conversation: Some(main.id().clone()),
                rerun: Some(rerun.id.clone()),
            }),
            ..Default::default()
        })
        .unwrap();

    let family = skein::family(&store, &deeper.conversation().id())
        .await
        .unwrap();
    assert_eq!(family.focus, deeper.conversation().id());
    assert_eq!(family.focus().name.as_deref(), Some("deeper"));
    let joined = |name: &str| {
        family
            .members
            .iter()
            .find(|m| m.conversation.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("{name} is a member"))
            .joined
            .clone()
    };
    assert_eq!(joined("main"), Joined::First);
    assert_eq!(family.members[0].conversation.id, main.id());
    assert_eq!(
        joined("fork"),
        Joined::Branch {
            from: main.id().clone(),
            at: Some(first.head())
        }
    );
    assert_eq!(
        joined("deeper"),
        Joined::Branch {
            from: fork.conversation().id().clone(),
            at: Some(fork.head())
        }
    );
    assert_eq!(
        joined("at-node"),
        Joined::Branch {
            from: main.id().clone(),
            at: Some(first.head())
        },
        "a fork at a node names the conversation whose turn produced it"
    );
    assert_eq!(
        joined("from-rerun"),
        Joined::Rerun {
            from: main.id().clone(),
            at: answer.head_id(),
            rerun: rerun.id.clone()
        }
    );
    assert!(
        family
            .member(&branch.conversation().id())
            .is_some_and(|m| matches!(m.joined, Joined::Branch { .. })),
        "the reply branch"
    );
    assert_eq!(family.members.len(), 6);
    assert!(!family.more_members);
    assert_eq!(family.reruns, vec![rerun.clone()]);
    let mut sharing: Vec<&str> = family
        .shares
        .iter()
        .map(|s| s.conversation.name.as_deref().unwrap())
        .collect();
    sharing.sort();
    assert_eq!(sharing, ["again", "bare"]);
    assert!(
        family
            .shares
            .iter()
            .all(|s| s.root == first.thread().nodes()[0].id())
    );
    assert_eq!(bare.conversation().origin().unwrap().conversation, None);

    // Every member's head and the rerun's answer are shown, each node once.
    let graph = family.graph(&store, 1000).await.unwrap();
    assert!(!graph.truncated);
    let shown: std::collections::HashSet<_> = graph.nodes.iter().map(|n| n.id).collect();
    assert_eq!(shown.len(), graph.nodes.len());
    for member in &family.members {
        assert!(shown.contains(&member.conversation.head.unwrap()));
    }
    assert!(shown.contains(&answer.head_id().unwrap()));
    assert!(shown.contains(&at_node.head()) && shown.contains(&bare.head()));
    // A tight limit keeps the focus's latest messages and says it cut.
    let tight = family.graph(&store, 3).await.unwrap();
    assert!(tight.truncated);
    assert_eq!(tight.nodes.len(), 3);
    assert_eq!(tight.nodes[2].id, deeper.head());
    assert_eq!(from_rerun.name.as_deref(), Some("from-rerun"));
}

/// The text of the message a run names as its input (stored: it must be).
fn input_text(store: &Store, run: &skein::store::RunRecord) -> String {
    let input = run.input_head.expect("the run names its input");
    store.node(input).unwrap().message.joined_text()
}

/// `verify` finds nothing wrong, and an export imports into a new store.
fn assert_consistent(store: &Store) {
    let report = store.verify().unwrap();
    assert!(report.is_ok(), "{:?}", report.problems);
    let mut export = Vec::new();
    store.export(&mut export).unwrap();
    let (_dir, fresh) = self::store();
    let imported = fresh.import(&mut export.as_slice()).unwrap();
    assert_eq!(imported.runs as u64, report.runs);
    assert!(fresh.verify().unwrap().is_ok());
}

fn count(store: &Store, table: &str) -> i64 {
    store
        .raw_connection()
        .unwrap()
        .query_row(&format!("SELECT COUNT(*) FROM {table}"), [], |row| {
            row.get(0)
        })
        .unwrap()
}

/// An engine whose `main` profile runs on `provider`, with the configured
/// prompt `brief`: a system message carrying a cache hint, then a user
/// message, over the variable `topic`.
fn briefing_engine(
    kind: skein::engine::config::BackendKind,
    provider: Option<Arc<Recording>>,
) -> skein::Engine {
    use skein::engine::config::{
        BackendDef, Catalog, CredentialSource, MessageTemplate, Profile, PromptDef,
    };
    let catalog = Catalog::new()
        .backend(BackendDef::new("main", kind))
        .profile(Profile::new("main", "main", "main-model").credential(CredentialSource::None))
        .prompt(
            PromptDef::new(
                "brief",
                vec![
                    MessageTemplate::new(Role::System, "Shared notes on {{ topic }}.")
                        .cache(CacheHint::Ephemeral),
                    MessageTemplate::new(Role::User, "Tell me about {{ topic }}."),
                ],
            )
            .variable("topic"),
        );
    let mut builder = skein::Engine::builder(catalog);
    if let Some(provider) = provider {
        builder = builder.provider("main", provider);
    }
    builder.build().unwrap()
}

/// The (text, part) pairs of `request` that carry a cache hint.
fn cache_hinted(
    thread: &skein::Thread,
    annotations: &skein::core::Annotations,
) -> Vec<(String, u32)> {
    annotations
        .iter()
        .filter(|(_, list)| list.contains(&Annotation::CacheHint(CacheHint::Ephemeral)))
        .map(|(at, _)| {
            let node = thread.at(at.node).expect("a node of the request");
            (node.head().unwrap().message().joined_text(), at.part)
        })
        .collect()
}

#[tokio::test]
async fn a_configured_prompt_is_prepared_without_running_then_sent_and_recorded() {
    let recorder = Recording::scripted(SCRIPT);
    let engine = briefing_engine(
        skein::engine::config::BackendKind::Echo,
        Some(recorder.clone()),
    );
    let model = skein::Model::from_profile(&engine, "main").unwrap();
    let (_dir, store) = store();
    let conversation = model.conversation().store(&store).build();
    let prompt = conversation.prompt(TurnInput::configured("brief").var("topic", "tides"));

    // Prepared: the rendered request, with nothing run or recorded.
    let prepared = prompt.prepare().unwrap();
    assert_eq!(
        transcript(&prepared.thread),
        [
            "System: Shared notes on tides.",
            "User: Tell me about tides."
        ]
    );
    assert_eq!(prepared.prompt.as_ref().unwrap().id, "brief");
    assert_eq!(
        (prepared.profile.as_str(), prepared.model.as_str()),
        ("main", "main-model")
    );
    let hint = vec![("Shared notes on tides.".to_string(), 0)];
    assert_eq!(cache_hinted(&prepared.thread, &prepared.annotations), hint);
    assert_eq!(recorder.count(), 0);
    assert_eq!(count(&store, "runs"), 0);
    assert!(store.list_conversations(10).unwrap().is_empty());

    // Sent: the provider gets exactly what was prepared, and the turn is
    // recorded with the hint on its run.
    let response = prompt.send().await.unwrap();
    assert_eq!(response.text(), "you said: Tell me about tides.");
    let sent = recorder.last();
    assert_eq!(sent.thread, prepared.thread);
    assert_eq!(sent.annotations, prepared.annotations);
    let run = store.run_record(response.run_id()).unwrap();
    assert_eq!(cache_hinted(&prepared.thread, &run.annotations), hint);
    assert_eq!(
        store.conversation(&conversation.id()).unwrap().head,
        Some(response.head())
    );
    // A later turn sends the history with its hint.
    let reply = response.reply("and currents?").send().await.unwrap();
    assert_eq!(
        cache_hinted(reply.thread(), &recorder.last().annotations),
        hint
    );

    // Messages given beside the prompt follow its messages.
    let with_text = model
        .prompt(
            TurnInput::configured("brief")
                .var("topic", "ice")
                .message(Message::user("Briefly.")),
        )
        .prepare()
        .unwrap();
    assert_eq!(
        transcript(&with_text.thread),
        [
            "System: Shared notes on ice.",
            "User: Tell me about ice.",
            "User: Briefly."
        ]
    );

    // Bad requests fail before any call, and record nothing.
    let (calls, runs) = (recorder.count(), count(&store, "runs"));
    let missing = conversation
        .prompt(TurnInput::configured("brief"))
        .send()
        .await;
    assert!(
        matches!(missing, Err(Error::Engine(EngineError::InvalidRequest(ref why))) if why.contains("topic")),
        "{missing:?}"
    );
    let unknown = conversation.prompt(TurnInput::configured("nope")).prepare();
    assert!(
        matches!(unknown, Err(Error::Engine(EngineError::PromptLoad { .. }))),
        "{unknown:?}"
    );
    let stray = conversation
        .prompt(TurnInput::new().var("topic", "x"))
        .send()
        .await;
    assert!(
        matches!(stray, Err(Error::Engine(EngineError::InvalidRequest(_)))),
        "{stray:?}"
    );
    assert_eq!((recorder.count(), count(&store, "runs")), (calls, runs));
}

#[tokio::test]
async fn a_template_cache_hint_reaches_anthropic_as_cache_control() {
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let stream = std::fs::read_to_string(format!(
        "{}/../skein-providers/tests/data/anthropic/text_stream.sse",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let server = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_raw(stream.into_bytes(), "text/event-stream"),
        )
        .mount(&server)
        .await;
    let engine = briefing_engine(
        skein::engine::config::BackendKind::Anthropic {
            base_url: Some(server.uri()),
        },
        None,
    );
    let model = skein::Model::from_profile(&engine, "main").unwrap();
    let (_dir, store) = store();
    let response = model
        .conversation()
        .store(&store)
        .build()
        .prompt(TurnInput::configured("brief").var("topic", "tides"))
        .send()
        .await
        .unwrap();
    // The model the provider says answered is kept with the run, beside the
    // one skein called, and travels with an export.
    let run = store.run_record(response.run_id()).unwrap();
    assert_eq!(run.model, "main-model");
    assert_eq!(
        run.response_model.as_deref(),
        Some("claude-sonnet-4-5-20250929")
    );
    assert_consistent(&store);
    let requests = server.received_requests().await.unwrap();
    let body: serde_json::Value = serde_json::from_slice(&requests[0].body).unwrap();
    assert_eq!(
        body["system"],
        serde_json::json!([{
            "type": "text",
            "text": "Shared notes on tides.",
            "cache_control": {"type": "ephemeral"}
        }])
    );
    assert!(
        !body["messages"].to_string().contains("cache_control"),
        "only the hinted message is cached: {body}"
    );
}
