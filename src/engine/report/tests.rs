use super::*;

#[test]
fn a_name_that_could_forge_a_line_stays_on_its_own() {
    let r = FileReport::new(PathBuf::from("/srv/x\ny"), Outcome::Refreshed);
    assert_eq!(r.human_line().lines().count(), 1);
}
