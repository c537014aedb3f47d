//! kubectl's table layout (`kubectl get`, `-o wide`): upper-case headers, columns left-aligned
//! and padded to their widest cell, three spaces apart, the last column not padded.

/// The lines of a table; every row has the header's number of cells.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> Vec<String> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            out.push_str(cell);
            if i < last {
                let pad = w - cell.chars().count() + 3;
                out.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out
    };
    std::iter::once(line(header.to_vec()))
        .chain(
            rows.iter()
                .map(|r| line(r.iter().map(String::as_str).collect())),
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_like_kubectl_get() {
        let rows = vec![
            vec![
                "cicd".into(),
                "services/forgejo".into(),
                "Healthy".into(),
                "ok".into(),
            ],
            vec![
                "cicd".into(),
                "databases.postgresql.cnpg.io/app".into(),
                "Progressing".into(),
                "Database cicd/app: not applied yet".into(),
            ],
        ];
        let lines = render(&["NAMESPACE", "TARGET", "STATUS", "MESSAGE"], &rows);
        assert_eq!(
            lines,
            [
                "NAMESPACE   TARGET                             STATUS        MESSAGE",
                "cicd        services/forgejo                   Healthy       ok",
                "cicd        databases.postgresql.cnpg.io/app   Progressing   Database cicd/app: not applied yet",
            ]
        );
    }

    #[test]
    fn widths_count_characters_not_bytes() {
        let lines = render(&["A", "B"], &[vec!["é".into(), "x".into()]]);
        assert_eq!(lines[1], "é   x");
    }
}
