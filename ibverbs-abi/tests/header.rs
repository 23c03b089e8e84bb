//! The C header check: every struct of `src/abi.rs` against the system's
//! `<infiniband/verbs.h>` (Debian's libibverbs-dev, rdma-core 44). The
//! sizes and offsets come from the Rust side (`size_of`, `offset_of!`); a
//! C program compiled against the header asserts each one, and runs linked
//! against this library (it says which file `ibv_get_device_list` came
//! from, and lists our device).

mod common;

use ibverbs_abi::abi::*;
use std::mem::{offset_of, size_of};
use std::path::Path;

/// (C struct, C member designator, Rust offset).
type Offsets = Vec<(&'static str, &'static str, usize)>;
/// (C struct, Rust size).
type Sizes = Vec<(&'static str, usize)>;

fn layout() -> (Offsets, Sizes) {
    let mut off = Vec::new();
    let mut size = Vec::new();
    macro_rules! s {
        ($t:ident) => {
            size.push((stringify!($t), size_of::<$t>()))
        };
    }
    macro_rules! f {
        ($t:ident, $($f:ident).+) => {
            off.push((stringify!($t), stringify!($($f).+), offset_of!($t, $($f).+)))
        };
        ($t:ident, $($f:ident).+ => $c:expr) => {
            off.push((stringify!($t), $c, offset_of!($t, $($f).+)))
        };
    }
    s!(ibv_gid);
    s!(ibv_gid_entry);
    f!(ibv_gid_entry, gid_index);
    f!(ibv_gid_entry, gid_type);
    f!(ibv_gid_entry, ndev_ifindex);
    s!(ibv_device);
    f!(ibv_device, node_type);
    f!(ibv_device, transport_type);
    f!(ibv_device, name);
    f!(ibv_device, dev_name);
    f!(ibv_device, dev_path);
    f!(ibv_device, ibdev_path);
    s!(ibv_context_ops);
    f!(ibv_context_ops, alloc_mw);
    f!(ibv_context_ops, bind_mw);
    f!(ibv_context_ops, dealloc_mw);
    f!(ibv_context_ops, poll_cq);
    f!(ibv_context_ops, req_notify_cq);
    f!(ibv_context_ops, post_srq_recv);
    f!(ibv_context_ops, post_send);
    f!(ibv_context_ops, post_recv);
    f!(ibv_context_ops, _compat_async_event);
    s!(ibv_context);
    f!(ibv_context, device);
    f!(ibv_context, ops);
    f!(ibv_context, cmd_fd);
    f!(ibv_context, async_fd);
    f!(ibv_context, num_comp_vectors);
    f!(ibv_context, mutex);
    f!(ibv_context, abi_compat);
    s!(verbs_context);
    f!(verbs_context, query_port);
    f!(verbs_context, advise_mr);
    f!(verbs_context, advise_mr);
    f!(verbs_context, alloc_parent_domain);
    f!(verbs_context, dealloc_td);
    f!(verbs_context, alloc_td);
    f!(verbs_context, modify_cq);
    f!(verbs_context, query_rt_values);
    f!(verbs_context, create_cq_ex);
    f!(verbs_context, priv_ => "priv");
    f!(verbs_context, query_device_ex);
    f!(verbs_context, open_qp);
    f!(verbs_context, create_qp_ex);
    f!(verbs_context, close_xrcd);
    f!(verbs_context, _abi_placeholder3 => "_ABI_placeholder3");
    f!(verbs_context, sz);
    f!(verbs_context, context);
    s!(ibv_device_attr);
    f!(ibv_device_attr, node_guid);
    f!(ibv_device_attr, max_mr_size);
    f!(ibv_device_attr, vendor_id);
    f!(ibv_device_attr, max_qp);
    f!(ibv_device_attr, device_cap_flags);
    f!(ibv_device_attr, max_qp_rd_atom);
    f!(ibv_device_attr, atomic_cap);
    f!(ibv_device_attr, max_srq_sge);
    f!(ibv_device_attr, max_pkeys);
    f!(ibv_device_attr, local_ca_ack_delay);
    f!(ibv_device_attr, phys_port_cnt);
    s!(ibv_device_attr_ex);
    f!(ibv_device_attr_ex, comp_mask);
    f!(ibv_device_attr_ex, odp_caps);
    f!(ibv_device_attr_ex, completion_timestamp_mask);
    f!(ibv_device_attr_ex, hca_core_clock);
    f!(ibv_device_attr_ex, device_cap_flags_ex);
    f!(ibv_device_attr_ex, tso_caps);
    f!(ibv_device_attr_ex, rss_caps);
    f!(ibv_device_attr_ex, max_wq_type_rq);
    f!(ibv_device_attr_ex, packet_pacing_caps);
    f!(ibv_device_attr_ex, raw_packet_caps);
    f!(ibv_device_attr_ex, tm_caps);
    f!(ibv_device_attr_ex, cq_mod_caps);
    f!(ibv_device_attr_ex, max_dm_size);
    f!(ibv_device_attr_ex, pci_atomic_caps);
    f!(ibv_device_attr_ex, xrc_odp_caps);
    f!(ibv_device_attr_ex, phys_port_cnt_ex);
    s!(ibv_port_attr);
    f!(ibv_port_attr, gid_tbl_len);
    f!(ibv_port_attr, max_msg_sz);
    f!(ibv_port_attr, pkey_tbl_len);
    f!(ibv_port_attr, lid);
    f!(ibv_port_attr, lmc);
    f!(ibv_port_attr, active_speed);
    f!(ibv_port_attr, link_layer);
    f!(ibv_port_attr, flags);
    f!(ibv_port_attr, port_cap_flags2);
    s!(ibv_async_event);
    f!(ibv_async_event, event_type);
    s!(ibv_wc);
    f!(ibv_wc, status);
    f!(ibv_wc, opcode);
    f!(ibv_wc, vendor_err);
    f!(ibv_wc, byte_len);
    f!(ibv_wc, imm_data);
    f!(ibv_wc, qp_num);
    f!(ibv_wc, src_qp);
    f!(ibv_wc, wc_flags);
    f!(ibv_wc, pkey_index);
    f!(ibv_wc, slid);
    f!(ibv_wc, sl);
    f!(ibv_wc, dlid_path_bits);
    s!(ibv_pd);
    f!(ibv_pd, handle);
    s!(ibv_mr);
    f!(ibv_mr, pd);
    f!(ibv_mr, addr);
    f!(ibv_mr, length);
    f!(ibv_mr, handle);
    f!(ibv_mr, lkey);
    f!(ibv_mr, rkey);
    s!(ibv_global_route);
    f!(ibv_global_route, flow_label);
    f!(ibv_global_route, sgid_index);
    f!(ibv_global_route, hop_limit);
    f!(ibv_global_route, traffic_class);
    s!(ibv_grh);
    f!(ibv_grh, sgid);
    f!(ibv_grh, dgid);
    s!(ibv_ah_attr);
    f!(ibv_ah_attr, dlid);
    f!(ibv_ah_attr, sl);
    f!(ibv_ah_attr, static_rate);
    f!(ibv_ah_attr, is_global);
    f!(ibv_ah_attr, port_num);
    s!(ibv_srq_attr);
    s!(ibv_srq_init_attr);
    f!(ibv_srq_init_attr, attr);
    s!(ibv_qp_cap);
    f!(ibv_qp_cap, max_inline_data);
    s!(ibv_qp_init_attr);
    f!(ibv_qp_init_attr, send_cq);
    f!(ibv_qp_init_attr, recv_cq);
    f!(ibv_qp_init_attr, srq);
    f!(ibv_qp_init_attr, cap);
    f!(ibv_qp_init_attr, qp_type);
    f!(ibv_qp_init_attr, sq_sig_all);
    s!(ibv_qp_attr);
    f!(ibv_qp_attr, cur_qp_state);
    f!(ibv_qp_attr, path_mtu);
    f!(ibv_qp_attr, qkey);
    f!(ibv_qp_attr, rq_psn);
    f!(ibv_qp_attr, sq_psn);
    f!(ibv_qp_attr, dest_qp_num);
    f!(ibv_qp_attr, qp_access_flags);
    f!(ibv_qp_attr, cap);
    f!(ibv_qp_attr, ah_attr);
    f!(ibv_qp_attr, alt_ah_attr);
    f!(ibv_qp_attr, pkey_index);
    f!(ibv_qp_attr, en_sqd_async_notify);
    f!(ibv_qp_attr, max_rd_atomic);
    f!(ibv_qp_attr, max_dest_rd_atomic);
    f!(ibv_qp_attr, min_rnr_timer);
    f!(ibv_qp_attr, port_num);
    f!(ibv_qp_attr, timeout);
    f!(ibv_qp_attr, retry_cnt);
    f!(ibv_qp_attr, rnr_retry);
    f!(ibv_qp_attr, alt_timeout);
    f!(ibv_qp_attr, rate_limit);
    s!(ibv_sge);
    f!(ibv_sge, length);
    f!(ibv_sge, lkey);
    s!(ibv_send_wr);
    f!(ibv_send_wr, next);
    f!(ibv_send_wr, sg_list);
    f!(ibv_send_wr, num_sge);
    f!(ibv_send_wr, opcode);
    f!(ibv_send_wr, send_flags);
    f!(ibv_send_wr, imm_data);
    f!(ibv_send_wr, wr.rdma.remote_addr);
    f!(ibv_send_wr, wr.rdma.rkey);
    f!(ibv_send_wr, wr.atomic.compare_add);
    f!(ibv_send_wr, wr.atomic.swap);
    f!(ibv_send_wr, wr.atomic.rkey);
    f!(ibv_send_wr, wr.ud.ah);
    f!(ibv_send_wr, wr.ud.remote_qpn);
    f!(ibv_send_wr, wr.ud.remote_qkey);
    f!(ibv_send_wr, remote_srqn => "qp_type.xrc.remote_srqn");
    f!(ibv_send_wr, ext.bind_mw.bind_info.mw_access_flags => "bind_mw.bind_info.mw_access_flags");
    f!(ibv_send_wr, ext.tso.mss => "tso.mss");
    s!(ibv_recv_wr);
    f!(ibv_recv_wr, next);
    f!(ibv_recv_wr, sg_list);
    f!(ibv_recv_wr, num_sge);
    s!(ibv_srq);
    f!(ibv_srq, srq_context);
    f!(ibv_srq, pd);
    f!(ibv_srq, handle);
    f!(ibv_srq, mutex);
    f!(ibv_srq, cond);
    f!(ibv_srq, events_completed);
    s!(ibv_rx_hash_conf);
    s!(ibv_data_buf);
    s!(ibv_xrcd_init_attr);
    f!(ibv_xrcd_init_attr, fd);
    f!(ibv_xrcd_init_attr, oflags);
    s!(ibv_xrcd);
    s!(ibv_tm_cap);
    f!(ibv_tm_cap, max_ops);
    s!(ibv_srq_init_attr_ex);
    f!(ibv_srq_init_attr_ex, attr);
    f!(ibv_srq_init_attr_ex, comp_mask);
    f!(ibv_srq_init_attr_ex, srq_type);
    f!(ibv_srq_init_attr_ex, pd);
    f!(ibv_srq_init_attr_ex, xrcd);
    f!(ibv_srq_init_attr_ex, cq);
    f!(ibv_srq_init_attr_ex, tm_cap);
    s!(ibv_qp_open_attr);
    f!(ibv_qp_open_attr, qp_num);
    f!(ibv_qp_open_attr, xrcd);
    f!(ibv_qp_open_attr, qp_context);
    f!(ibv_qp_open_attr, qp_type);
    s!(ibv_qp_init_attr_ex);
    f!(ibv_qp_init_attr_ex, cap);
    f!(ibv_qp_init_attr_ex, sq_sig_all);
    f!(ibv_qp_init_attr_ex, comp_mask);
    f!(ibv_qp_init_attr_ex, pd);
    f!(ibv_qp_init_attr_ex, xrcd);
    f!(ibv_qp_init_attr_ex, create_flags);
    f!(ibv_qp_init_attr_ex, max_tso_header);
    f!(ibv_qp_init_attr_ex, rwq_ind_tbl);
    f!(ibv_qp_init_attr_ex, rx_hash_conf);
    f!(ibv_qp_init_attr_ex, source_qpn);
    f!(ibv_qp_init_attr_ex, send_ops_flags);
    // No size: rdma-core 45 appends wr_flush, which 44's header lacks.
    f!(ibv_qp_ex, ex.comp_mask => "comp_mask");
    f!(ibv_qp_ex, ex.wr_id => "wr_id");
    f!(ibv_qp_ex, ex.wr_flags => "wr_flags");
    f!(ibv_qp_ex, ex.wr_atomic_cmp_swp => "wr_atomic_cmp_swp");
    f!(ibv_qp_ex, ex.wr_bind_mw => "wr_bind_mw");
    f!(ibv_qp_ex, ex.wr_send => "wr_send");
    f!(ibv_qp_ex, ex.wr_send_tso => "wr_send_tso");
    f!(ibv_qp_ex, ex.wr_set_ud_addr => "wr_set_ud_addr");
    f!(ibv_qp_ex, ex.wr_set_inline_data_list => "wr_set_inline_data_list");
    f!(ibv_qp_ex, ex.wr_set_sge_list => "wr_set_sge_list");
    f!(ibv_qp_ex, ex.wr_start => "wr_start");
    f!(ibv_qp_ex, ex.wr_complete => "wr_complete");
    f!(ibv_qp_ex, ex.wr_abort => "wr_abort");
    f!(ibv_qp_ex, ex.wr_atomic_write => "wr_atomic_write");
    s!(ibv_cq_init_attr_ex);
    f!(ibv_cq_init_attr_ex, cq_context);
    f!(ibv_cq_init_attr_ex, channel);
    f!(ibv_cq_init_attr_ex, comp_vector);
    f!(ibv_cq_init_attr_ex, wc_flags);
    f!(ibv_cq_init_attr_ex, comp_mask);
    f!(ibv_cq_init_attr_ex, flags);
    f!(ibv_cq_init_attr_ex, parent_domain);
    s!(ibv_poll_cq_attr);
    s!(ibv_wc_tm_info);
    s!(ibv_values_ex);
    f!(ibv_values_ex, raw_clock);
    s!(ibv_cq_ex);
    f!(ibv_cq_ex, cq_base.cqe => "cqe");
    f!(ibv_cq_ex, cq_base.comp_events_completed => "comp_events_completed");
    f!(ibv_cq_ex, ex.comp_mask => "comp_mask");
    f!(ibv_cq_ex, ex.status => "status");
    f!(ibv_cq_ex, ex.wr_id => "wr_id");
    f!(ibv_cq_ex, ex.start_poll => "start_poll");
    f!(ibv_cq_ex, ex.end_poll => "end_poll");
    f!(ibv_cq_ex, ex.read_opcode => "read_opcode");
    f!(ibv_cq_ex, ex.read_imm_data => "read_imm_data");
    f!(ibv_cq_ex, ex.read_dlid_path_bits => "read_dlid_path_bits");
    f!(ibv_cq_ex, ex.read_completion_ts => "read_completion_ts");
    f!(ibv_cq_ex, ex.read_tm_info => "read_tm_info");
    f!(ibv_cq_ex, ex.read_completion_wallclock_ns => "read_completion_wallclock_ns");
    s!(ibv_td_init_attr);
    s!(ibv_td);
    s!(ibv_parent_domain_init_attr);
    f!(ibv_parent_domain_init_attr, td);
    f!(ibv_parent_domain_init_attr, comp_mask);
    f!(ibv_parent_domain_init_attr, alloc);
    f!(ibv_parent_domain_init_attr, free);
    f!(ibv_parent_domain_init_attr, pd_context);
    s!(ibv_mw);
    f!(ibv_mw, pd);
    f!(ibv_mw, rkey);
    f!(ibv_mw, handle);
    f!(ibv_mw, mw_type => "type");
    s!(ibv_mw_bind);
    f!(ibv_mw_bind, send_flags);
    f!(ibv_mw_bind, bind_info);
    s!(ibv_qp);
    f!(ibv_qp, qp_context);
    f!(ibv_qp, send_cq);
    f!(ibv_qp, recv_cq);
    f!(ibv_qp, srq);
    f!(ibv_qp, handle);
    f!(ibv_qp, qp_num);
    f!(ibv_qp, state);
    f!(ibv_qp, qp_type);
    f!(ibv_qp, mutex);
    f!(ibv_qp, cond);
    f!(ibv_qp, events_completed);
    s!(ibv_comp_channel);
    f!(ibv_comp_channel, fd);
    f!(ibv_comp_channel, refcnt);
    s!(ibv_cq);
    f!(ibv_cq, channel);
    f!(ibv_cq, cq_context);
    f!(ibv_cq, handle);
    f!(ibv_cq, cqe);
    f!(ibv_cq, mutex);
    f!(ibv_cq, cond);
    f!(ibv_cq, comp_events_completed);
    f!(ibv_cq, async_events_completed);
    s!(ibv_ah);
    f!(ibv_ah, pd);
    f!(ibv_ah, handle);
    (off, size)
}

#[test]
fn every_struct_matches_the_system_header() {
    if !Path::new("/usr/include/infiniband/verbs.h").exists() {
        testkit::skip("/usr/include/infiniband/verbs.h is absent (apt-get install libibverbs-dev)");
        return;
    }
    if common::need("cc", "gcc").is_none() {
        return;
    }
    let (off, size) = layout();
    let mut src = String::from(
        "#define _GNU_SOURCE\n#include <stddef.h>\n#include <stdio.h>\n#include <string.h>\n#include <dlfcn.h>\n\
         #include <infiniband/verbs.h>\n\
         static int bad, checked;\n\
         #define SZ(t, n) do { checked++; if (sizeof(struct t) != (n)) { bad++; printf(\"MISMATCH sizeof(%s) C %zu Rust %zu\\n\", #t, sizeof(struct t), (size_t)(n)); } } while (0)\n\
         #define OFF(t, f, n) do { checked++; if (offsetof(struct t, f) != (n)) { bad++; printf(\"MISMATCH offsetof(%s, %s) C %zu Rust %zu\\n\", #t, #f, offsetof(struct t, f), (size_t)(n)); } } while (0)\n\
         int main(void) {\n",
    );
    for (t, n) in &size {
        // `union ibv_gid` is a union in C.
        if *t == "ibv_gid" {
            src.push_str(&format!("  checked++; if (sizeof(union ibv_gid) != {n}) {{ bad++; printf(\"MISMATCH sizeof(ibv_gid)\\n\"); }}\n"));
        } else {
            src.push_str(&format!("  SZ({t}, {n});\n"));
        }
    }
    for (t, f, n) in &off {
        src.push_str(&format!("  OFF({t}, {f}, {n});\n"));
    }
    src.push_str(
        "  Dl_info info; memset(&info, 0, sizeof info);\n\
         dladdr((void *)ibv_get_device_list, &info);\n\
         printf(\"library %s\\n\", info.dli_fname ? info.dli_fname : \"?\");\n\
         int num = 0; struct ibv_device **l = ibv_get_device_list(&num);\n\
         printf(\"devices %d first %s\\n\", num, l && num > 0 ? ibv_get_device_name(l[0]) : \"-\");\n\
         if (l) ibv_free_device_list(l);\n\
         printf(\"checked %d mismatched %d\\n\", checked, bad);\n\
         return bad != 0;\n}\n",
    );
    let dir = common::link_dir("header");
    let exe = common::compile(&dir, "layout", &src);
    let out = std::process::Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env("SOFTROCE_DEVICES", "hdrchk0=127.0.9.1")
        .output()
        .expect("run the layout check");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    let expected = size.len() + off.len();
    assert!(out.status.success(), "layouts differ from verbs.h:\n{}", common::show(&out));
    assert!(text.contains(&format!("checked {expected} mismatched 0")), "{text}");
    assert!(text.contains(&format!("library {}/libibverbs.so.1", dir.display())), "not our library: {text}");
    assert!(text.contains("devices 1 first hdrchk0"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
