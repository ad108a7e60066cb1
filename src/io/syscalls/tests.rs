use super::*;

#[test]
fn idle_class_writes_are_raised_to_best_effort() {
    assert_eq!(write_ioprio_for(0), 0, "default: the thread's own");
    assert_eq!(write_ioprio_for(((IOPRIO_CLASS_BE << 13) | 4).into()), 0);
    assert_eq!(
        write_ioprio_for((IOPRIO_CLASS_IDLE << 13).into()),
        (IOPRIO_CLASS_BE << 13) | 7
    );
    assert_eq!(write_ioprio_for(-1), 0, "an error leaves it alone");
}
