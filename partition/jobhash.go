package partition

// JobHash is the job's wire identity, transport.Config.JobHash of every
// node of the plan and of the serving replicas that follow it: the hash
// of the model's source and its name. A peer of another plan is refused.
func (p *Plan) JobHash() string { return p.Info.SourceSHA256 + "/" + p.Info.Model }
